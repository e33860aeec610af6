// Internal to tracking/mlflow/: the requests that RunLogger sends and the spool file keeps, as self-contained
// JSON objects, one per spool line:
//   {"op":"log-batch","run_id":"…","body":{…runs/log-batch body…}}
//   {"op":"update","run_id":"…","body":{…runs/update body…}}
//   {"op":"upload","artifact_uri":"mlflow-artifacts:/…","file":"/abs/path","path":"dir/name"}
// The bodies are what the REST API takes, metric timestamps as given: a request sent twice (delivered, then
// replayed from the spool) adds nothing the second time (the server keeps one copy of an identical metric).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <string>
#include <vector>

#include "tracking/mlflow/mlflow.h"

namespace ranzcr::tracking::detail {

/// The runs/log-batch body; NaN and infinities as "NaN", "Infinity", "-Infinity"; param and tag values cut
/// to MLflow's limits (at a UTF-8 character boundary).
nlohmann::json batch_body(const std::string& run_id, const std::vector<Metric>& metrics,
                          const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags);
/// The runs/update body (end_time only when > 0).
nlohmann::json update_body(const std::string& run_id, RunStatus status, int64_t end_time_ms);

nlohmann::json batch_request(const std::string& run_id, nlohmann::json body);
nlohmann::json update_request(const std::string& run_id, nlohmann::json body);
nlohmann::json upload_request(const std::string& artifact_uri, const std::string& file,
                              const std::string& path);

/// The MLflow server as Delivery sends to it: one of the three requests at a time, through `client`.
class MlflowCourier : public Courier {
 public:
  explicit MlflowCourier(MlflowClient client) : client_(std::move(client)) {}
  std::string server_name() const override;
  bool is_request(const nlohmann::json& j) const override;
  /// MlflowError from the server, or for a request that is not one of the three (status 400: not worth a
  /// retry); a local file that cannot be read is an MlflowError with status 400 too.
  void send(const nlohmann::json& request) override;
  void cancel_sends_when(const std::atomic<bool>* flag) override;

 private:
  MlflowClient client_;
};

/// "MLflow tracking server <uri without user:password@>", as every message names the server.
std::string server_name(const std::string& uri);

/// The MlflowClient calls of this thread fail (no answer, "cancelled") within about a second once `*flag`
/// turns true; nullptr: never.
void set_thread_cancel_flag(const std::atomic<bool>* flag);

/// `uri` without any user:password@ in it, for messages.
std::string shown_uri(const std::string& uri);

}  // namespace ranzcr::tracking::detail
