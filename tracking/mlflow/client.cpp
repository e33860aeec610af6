// MlflowClient: MLflow's REST API (api/2.0/mlflow) and artifact proxy (api/2.0/mlflow-artifacts) over
// net::http_send, one call at a time; and the request bodies RunLogger and the spool file share.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "net/http.h"
#include "tracking/mlflow/mlflow.h"
#include "tracking/mlflow/requests.h"

namespace ranzcr::tracking {

namespace {

using nlohmann::json;

thread_local const std::atomic<bool>* cancel_flag = nullptr;

bool key_char_ok(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '_' || c == '-' || c == '.' || c == ' ' || c == '/';
}

std::string percent_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

net::HttpOptions http_options(const MlflowServer& s) {
  net::HttpOptions o;
  o.token = s.token;
  if (s.token.empty() && !s.username.empty()) o.basic_auth = s.username + ":" + s.password;
  o.connect_timeout_s = s.connect_timeout_s;
  o.idle_timeout_s = s.request_timeout_s;
  return o;
}

// What an HTTP error answer says: MLflow's {"error_code", "message"}, else the start of the body.
std::pair<std::string, std::string> error_of(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error_code") && j["error_code"].is_string()) {
    const std::string message = j.contains("message") && j["message"].is_string() ? j["message"] : "";
    return {j["error_code"].get<std::string>(), message};
  }
  return {"", body};
}

[[noreturn]] void fail_status(const MlflowServer& s, const std::string& what, const net::HttpReply& reply) {
  auto [code, message] = error_of(reply.body);
  std::string line = detail::server_name(s.uri) + ": " + what + ": HTTP " + std::to_string(reply.status);
  if (reply.status == 401 || reply.status == 403)
    line += " (check MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN)";
  if (!code.empty()) line += " " + code;
  if (!message.empty()) line += ": " + message;
  throw MlflowError(printable(line, 600), reply.status, code);
}

[[noreturn]] void fail_no_answer(const MlflowServer& s, const std::string& url, const net::HttpError& e) {
  std::string why = e.what();
  if (why.rfind(url + ": ", 0) == 0) why = why.substr(url.size() + 2);
  throw MlflowError(detail::server_name(s.uri) + ": no answer (" + why + ")", 0);
}

// Sends `request` to the server; the reply of a 2xx, MlflowError otherwise. `what` names the call.
net::HttpReply send(const MlflowServer& s, net::HttpRequest request, const std::string& what) {
  net::HttpReply reply;
  request.cancel = cancel_flag;
  try {
    reply = net::http_send(request, http_options(s));
  } catch (const net::HttpError& e) {
    if (e.write_error())  // the local file, not the server: a retry would not help
      throw MlflowError(detail::server_name(s.uri) + ": " + what + ": " + e.what(), 400);
    fail_no_answer(s, request.url, e);
  }
  if (reply.status < 200 || reply.status > 299) fail_status(s, what, reply);
  return reply;
}

// `read(answer)`, an MlflowError when the answer lacks what it reads (not the API's shape).
template <class Read>
auto from_answer(const MlflowServer& s, const std::string& endpoint, const std::string& answer, Read read) {
  try {
    return read(json::parse(answer));
  } catch (const json::exception& e) {
    throw MlflowError(detail::server_name(s.uri) + ": " + endpoint +
                          " answered without what MLflow's API returns (" + e.what() + ")",
                      200);
  }
}

RunInfo run_info_of(const json& answer) {
  const json& run = answer.at("run");
  const json& info = run.at("info");
  RunInfo r;
  r.run_id = info.value("run_id", info.value("run_uuid", ""));
  r.experiment_id = info.value("experiment_id", "");
  r.artifact_uri = info.value("artifact_uri", "");
  r.status = info.value("status", "");
  const json data = run.value("data", json::object());
  for (const auto& p : data.value("params", json::array()))
    r.params.emplace_back(p.at("key"), p.value("value", ""));
  for (const auto& t : data.value("tags", json::array()))
    r.tags.emplace_back(t.at("key"), t.value("value", ""));
  return r;
}

json key_values(const std::vector<KeyValue>& kvs, size_t max_value) {
  json a = json::array();
  for (const auto& [key, value] : kvs) {
    size_t n = std::min(value.size(), max_value);
    while (n > 0 && n < value.size() && (static_cast<unsigned char>(value[n]) & 0xC0) == 0x80) --n;
    a.push_back({{"key", key}, {"value", value.substr(0, n)}});
  }
  return a;
}

json metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

std::string metric_key(const std::string& key) {
  std::string out;
  for (const char c : key.substr(0, kMaxKeyLength)) out += key_char_ok(c) ? c : '_';
  // MLflow also refuses a name that a path normalisation would change ("a//b", "./a", "/a", "a/", "..").
  std::string norm;
  for (size_t b = 0; b <= out.size();) {
    size_t e = out.find('/', b);
    if (e == std::string::npos) e = out.size();
    std::string part = out.substr(b, e - b);
    if (part == "." || part == "..") part = "_";
    if (!part.empty()) norm += (norm.empty() ? "" : "/") + part;
    b = e + 1;
  }
  return norm.empty() ? "_" : norm;
}

const char* status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning:
      return "RUNNING";
    case RunStatus::kFinished:
      return "FINISHED";
    case RunStatus::kFailed:
      return "FAILED";
    case RunStatus::kKilled:
      return "KILLED";
  }
  return "RUNNING";
}

namespace detail {

json batch_body(const std::string& run_id, const std::vector<Metric>& metrics,
                const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  json m = json::array();
  for (const Metric& x : metrics)
    m.push_back(
        {{"key", x.key}, {"value", metric_value(x.value)}, {"timestamp", x.timestamp_ms}, {"step", x.step}});
  return {{"run_id", run_id},
          {"metrics", std::move(m)},
          {"params", key_values(params, kMaxParamValueLength)},
          {"tags", key_values(tags, kMaxTagValueLength)}};
}

json update_body(const std::string& run_id, RunStatus status, int64_t end_time_ms) {
  json body = {{"run_id", run_id}, {"status", status_name(status)}};
  if (end_time_ms > 0) body["end_time"] = end_time_ms;
  return body;
}

std::string shown_uri(const std::string& uri) {
  const size_t scheme = uri.find("://");
  const size_t at = uri.find('@');
  if (scheme == std::string::npos || at == std::string::npos) return uri;
  const size_t slash = uri.find('/', scheme + 3);
  if (slash != std::string::npos && slash < at) return uri;
  return uri.substr(0, scheme + 3) + uri.substr(at + 1);
}

void set_thread_cancel_flag(const std::atomic<bool>* flag) {
  cancel_flag = flag;
}

std::string server_name(const std::string& uri) {
  return "MLflow tracking server " + shown_uri(uri);
}

}  // namespace detail

MlflowClient::MlflowClient(MlflowServer server) : server_(std::move(server)) {
  while (!server_.uri.empty() && server_.uri.back() == '/') server_.uri.pop_back();
}

std::string MlflowClient::call(const std::string& method, const std::string& endpoint,
                               const std::string& json_or_query) {
  net::HttpRequest request;
  request.method = method;
  request.url = server_.uri + "/api/2.0/mlflow/" + endpoint;
  request.timeout_s = server_.connect_timeout_s + server_.request_timeout_s;
  if (method == "GET") {
    if (!json_or_query.empty()) request.url += "?" + json_or_query;
  } else {
    request.headers.push_back("Content-Type: application/json");
    request.body = json_or_query.empty() ? "{}" : json_or_query;
  }
  const net::HttpReply reply = send(server_, request, method + " " + endpoint);
  const json answer = json::parse(reply.body.empty() ? "{}" : reply.body, nullptr, false);
  if (answer.is_discarded())
    throw MlflowError(detail::server_name(server_.uri) + ": " + endpoint +
                          " answered something other than JSON (is this the tracking server's URI?)",
                      reply.status);
  return answer.dump();
}

std::string MlflowClient::experiment_id(const std::string& name) {
  const std::string query = "experiment_name=" + percent_encode(name, false);
  for (int attempt = 0;; ++attempt) {
    try {
      return from_answer(
          server_, "experiments/get-by-name", call("GET", "experiments/get-by-name", query),
          [](const json& j) { return j.at("experiment").at("experiment_id").get<std::string>(); });
    } catch (const MlflowError& e) {
      if (e.error_code() != "RESOURCE_DOES_NOT_EXIST" || attempt > 0) throw;
    }
    try {
      return from_answer(server_, "experiments/create",
                         call("POST", "experiments/create", json{{"name", name}}.dump()),
                         [](const json& j) { return j.at("experiment_id").get<std::string>(); });
    } catch (const MlflowError& e) {
      if (e.error_code() != "RESOURCE_ALREADY_EXISTS") throw;  // made meanwhile by another process: read it
    }
  }
}

RunInfo MlflowClient::create_run(const std::string& experiment_id, const std::string& run_name,
                                 int64_t start_time_ms, const std::vector<KeyValue>& tags) {
  json body = {{"experiment_id", experiment_id},
               {"start_time", start_time_ms},
               {"tags", key_values(tags, kMaxTagValueLength)}};
  if (!run_name.empty()) body["run_name"] = run_name;
  return from_answer(server_, "runs/create", call("POST", "runs/create", json_line(body)), run_info_of);
}

RunInfo MlflowClient::get_run(const std::string& run_id) {
  return from_answer(server_, "runs/get", call("GET", "runs/get", "run_id=" + percent_encode(run_id, false)),
                     run_info_of);
}

void MlflowClient::update_run(const std::string& run_id, RunStatus status, int64_t end_time_ms) {
  call("POST", "runs/update", detail::update_body(run_id, status, end_time_ms).dump());
}

void MlflowClient::log_batch(const std::string& run_id, const std::vector<Metric>& metrics,
                             const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  call("POST", "runs/log-batch", json_line(detail::batch_body(run_id, metrics, params, tags)));
}

void MlflowClient::upload_artifact(const std::string& artifact_uri, const std::string& local_path,
                                   const std::string& artifact_path) {
  const std::string scheme = "mlflow-artifacts:";
  if (artifact_uri.rfind(scheme, 0) != 0)
    throw MlflowError(
        detail::server_name(server_.uri) + ": the run's artifact URI " + artifact_uri +
            " is not proxied by the server (mlflow-artifacts:/); start it with --serve-artifacts",
        0);
  std::string path = artifact_uri.substr(scheme.size());
  if (path.rfind("//", 0) == 0) {  // mlflow-artifacts://host:port/path: the path on this server
    const size_t slash = path.find('/', 2);
    path = slash == std::string::npos ? "" : path.substr(slash);
  }
  while (!path.empty() && path.front() == '/') path.erase(0, 1);
  while (!path.empty() && path.back() == '/') path.pop_back();
  std::string rest = artifact_path;
  while (!rest.empty() && rest.front() == '/') rest.erase(0, 1);
  net::HttpRequest request;
  request.method = "PUT";
  request.url = server_.uri + "/api/2.0/mlflow-artifacts/artifacts/" + percent_encode(path, true) + "/" +
                percent_encode(rest, true);
  request.upload_file = local_path;
  request.headers.push_back("Content-Type: application/octet-stream");
  struct stat st {};
  const double megabytes = ::stat(local_path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1e6 : 0;
  request.timeout_s = server_.connect_timeout_s + server_.request_timeout_s + megabytes;
  send(server_, request, "uploading " + local_path + " as " + rest);
}

}  // namespace ranzcr::tracking
