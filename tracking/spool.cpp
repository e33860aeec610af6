// The spool file of requests the tracking server did not take (tracking/requests.h has the format):
// appended one line per write, replayed in order, rewritten atomically.

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/durable_file.h"
#include "tracking/mlflow.h"
#include "tracking/requests.h"

namespace ranzcr::tracking {

namespace {

using nlohmann::json;

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RANZCR_CHECK(in, "cannot read the MLflow spool file ", path, ": ", std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_request(const json& j) {
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string()) return false;
  const std::string op = j["op"];
  if (op == "log-batch" || op == "update") return j.contains("body") && j["body"].is_object();
  if (op == "upload") return j.contains("artifact_uri") && j.contains("file") && j.contains("path");
  return false;
}

// The spool files of this process are appended and rewritten under this lock: a rewrite keeps lines that
// were appended while the requests before them were sent.
std::mutex& spool_mutex() {
  static std::mutex m;
  return m;
}

struct SpoolLine {
  json request;
  size_t end = 0;  // the byte after its newline in the file's text
};

// The requests of a spool file's text; a last line cut short (no newline: a crash mid-append) is dropped.
std::vector<SpoolLine> parse_spool(const std::string& path, const std::string& text,
                                   const std::function<void(const std::string&)>& warn) {
  std::vector<SpoolLine> lines;
  size_t line_no = 0;
  for (size_t b = 0; b < text.size();) {
    const size_t e = text.find('\n', b);
    const std::string line = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
    ++line_no;
    b = e == std::string::npos ? text.size() : e + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (e == std::string::npos && !is_request(j)) {
      if (warn) warn(path + ": line " + std::to_string(line_no) + " was cut short (dropped)");
      break;
    }
    RANZCR_CHECK(is_request(j), path, ": line ", line_no,
                 " is not an MLflow spool request: ", line.substr(0, 200));
    lines.push_back({std::move(j), b});
  }
  return lines;
}

// Removes the first `handled` bytes of the spool file, which were `text`'s first bytes (lines appended since
// are kept); the file goes when nothing is left. A file rewritten by someone else meanwhile is left alone.
void drop_handled(const std::string& path, const std::string& text, size_t handled) {
  std::lock_guard<std::mutex> lock(spool_mutex());
  const std::string now = std::filesystem::exists(path) ? read_whole(path) : "";
  if (now.compare(0, handled, text, 0, handled) != 0) return;
  if (now.size() <= handled)
    std::filesystem::remove(path);
  else
    write_file_atomic(path, now.substr(handled));
}

}  // namespace

namespace detail {

json batch_request(const std::string& run_id, json body) {
  return {{"op", "log-batch"}, {"run_id", run_id}, {"body", std::move(body)}};
}

json update_request(const std::string& run_id, json body) {
  return {{"op", "update"}, {"run_id", run_id}, {"body", std::move(body)}};
}

json upload_request(const std::string& artifact_uri, const std::string& file, const std::string& path) {
  return {{"op", "upload"}, {"artifact_uri", artifact_uri}, {"file", file}, {"path", path}};
}

void send_request(MlflowClient& client, const json& request) {
  if (!is_request(request))
    throw MlflowError("not an MLflow request: " + json_line(request).substr(0, 200), 400);
  const std::string op = request["op"];
  if (op == "log-batch") {
    client.call("POST", "runs/log-batch", json_line(request["body"]));
  } else if (op == "update") {
    client.call("POST", "runs/update", json_line(request["body"]));
  } else {
    const std::string file = request["file"], artifact_uri = request["artifact_uri"];
    if (artifact_uri.rfind("mlflow-artifacts:", 0) != 0)  // the same answer every time: no retry
      throw MlflowError("the run's artifact URI " + artifact_uri +
                            " is not proxied by the MLflow server (mlflow-artifacts:/): " + file +
                            " not uploaded",
                        400);
    if (!std::filesystem::is_regular_file(file))
      throw MlflowError("artifact " + file + " is gone (not uploaded)", 400);
    client.upload_artifact(artifact_uri, file, request["path"]);
  }
}

void append_to_spool(const std::string& path, const json& request) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::lock_guard<std::mutex> lock(spool_mutex());
  append_line(path, json_line(request));
}

}  // namespace detail

SpoolReplay replay_spool(MlflowClient& client, const std::string& spool_path,
                         const std::function<void(const std::string&)>& warn) {
  SpoolReplay result;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(spool_mutex());
    if (!std::filesystem::exists(spool_path)) return result;
    text = read_whole(spool_path);
  }
  const std::vector<SpoolLine> lines = parse_spool(spool_path, text, warn);
  size_t done = 0;
  for (; done < lines.size(); ++done) {
    try {
      detail::send_request(client, lines[done].request);
      ++result.sent;
    } catch (const MlflowError& e) {
      if (e.retriable()) break;
      ++result.refused;
      if (warn) warn(std::string(e.what()) + " (spooled request dropped)");
    }
  }
  result.left = static_cast<int64_t>(lines.size() - done);
  // Every line handled: the whole text read (a cut-short last line included); else up to the first left.
  const size_t handled = done == lines.size() ? text.size() : (done == 0 ? 0 : lines[done - 1].end);
  if (handled > 0 || text.empty()) drop_handled(spool_path, text, handled);
  return result;
}

}  // namespace ranzcr::tracking
