// tracking/mlflow/requests.h: MLflow's requests as self-contained JSON, and the courier Delivery sends them
// with.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tracking/mlflow/mlflow.h"
#include "tracking/mlflow/requests.h"

namespace ranzcr::tracking {

namespace {

using nlohmann::json;

bool is_mlflow_request(const json& j) {
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string()) return false;
  const std::string op = j["op"];
  if (op == "log-batch" || op == "update") return j.contains("body") && j["body"].is_object();
  if (op == "upload") return j.contains("artifact_uri") && j.contains("file") && j.contains("path");
  return false;
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

std::string MlflowCourier::server_name() const {
  return detail::server_name(client_.server().uri);
}

bool MlflowCourier::is_request(const json& j) const {
  return is_mlflow_request(j);
}

void MlflowCourier::send(const json& request) {
  MlflowClient& client = client_;
  if (!is_mlflow_request(request))
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

void MlflowCourier::cancel_sends_when(const std::atomic<bool>* flag) {
  set_thread_cancel_flag(flag);
}

}  // namespace detail

SpoolReplay replay_spool(MlflowClient& client, const std::string& spool_path,
                         const std::function<void(const std::string&)>& warn) {
  detail::MlflowCourier courier(client);
  return replay_spool(courier, spool_path, warn);
}

}  // namespace ranzcr::tracking
