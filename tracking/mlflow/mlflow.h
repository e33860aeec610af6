// MLflow tracking through its documented REST API (api/2.0/mlflow, libcurl through net/http.h): experiments,
// runs, log-batch, run status, and artifacts uploaded through the tracking server's artifact proxy
// (api/2.0/mlflow-artifacts, what remote Python clients use for mlflow-artifacts:/ URIs). No LibTorch.
//
// MlflowClient makes one call at a time on the caller's thread; RunLogger (below) queues a run's logging
// and sends it from its own thread, batched, through tracking/delivery.h (retried, and spooled to a file when
// the server stays away).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tracking/delivery.h"
#include "tracking/tracker.h"

namespace ranzcr::tracking {

/// Where the server is and how to sign in (credentials as MLflow's own clients take them; never logged).
struct MlflowServer {
  std::string uri;       // http://host:port or https://host[:port][/prefix], no trailing '/'
  std::string username;  // HTTP basic auth (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD)
  std::string password;
  std::string token;  // "Authorization: Bearer" (MLFLOW_TRACKING_TOKEN); wins over basic auth
  double connect_timeout_s = 5;
  double request_timeout_s = 30;  // a whole call (an upload: this plus 1 s per MB)
};

/// A call that failed: no answer (`status` 0: refused, unresolved, timed out, cut off) or an HTTP error
/// status with MLflow's error_code ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", ...) and message.
/// Worth trying again later (DeliveryError::retriable): no answer, 408, 429 or a 5xx.
class MlflowError : public DeliveryError {
 public:
  MlflowError(const std::string& message, long status, std::string error_code = "")
      : DeliveryError(message, status == 0 || status == 408 || status == 429 || status >= 500),
        status_(status),
        error_code_(std::move(error_code)) {}
  long status() const { return status_; }
  const std::string& error_code() const { return error_code_; }

 private:
  long status_;
  std::string error_code_;
};

struct Metric {
  std::string key;
  double value = 0;  // NaN and infinities are sent as MLflow's JSON does ("NaN", "Infinity")
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};

/// MLflow's limits (mlflow/utils/validation.py of 3.x): per log-batch call, and per key/value.
inline constexpr size_t kMaxMetricsPerBatch = 1000, kMaxParamsPerBatch = 100, kMaxTagsPerBatch = 100,
                        kMaxEntitiesPerBatch = 1000;
inline constexpr size_t kMaxKeyLength = 250, kMaxParamValueLength = 6000, kMaxTagValueLength = 8000;

/// `key` as MLflow accepts it: characters outside letters, digits, '_', '-', '.', ' ', '/' become '_',
/// cut to kMaxKeyLength.
std::string metric_key(const std::string& key);

struct RunInfo {
  std::string run_id;
  std::string experiment_id;
  std::string artifact_uri;  // "mlflow-artifacts:/1/<run_id>/artifacts" when the server proxies artifacts
  std::string status;        // RUNNING, FINISHED, FAILED, KILLED, SCHEDULED
  std::vector<KeyValue> params, tags;
};

const char* status_name(RunStatus s);  // "RUNNING", "FINISHED", ...

class MlflowClient {
 public:
  explicit MlflowClient(MlflowServer server);
  const MlflowServer& server() const { return server_; }

  /// The id of the experiment `name`, created when there is none (a concurrent create is tolerated).
  std::string experiment_id(const std::string& name);
  /// A new run in `experiment_id` (runs/create), status RUNNING.
  RunInfo create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_time_ms,
                     const std::vector<KeyValue>& tags);
  /// runs/get; MlflowError with status 404 / RESOURCE_DOES_NOT_EXIST when the server has no such run.
  RunInfo get_run(const std::string& run_id);
  /// runs/update: the status, and the end time when `end_time_ms` > 0.
  void update_run(const std::string& run_id, RunStatus status, int64_t end_time_ms);
  /// runs/log-batch; at most the per-batch limits (the caller splits).
  void log_batch(const std::string& run_id, const std::vector<Metric>& metrics,
                 const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags);
  /// PUT the file at `local_path` to <artifact_uri>/<artifact_path> through the server's artifact proxy.
  /// MlflowError (status 0, not retriable in spirit) when the artifact URI is not mlflow-artifacts:/ (the
  /// server stores artifacts elsewhere and a remote client would need that store's credentials).
  void upload_artifact(const std::string& artifact_uri, const std::string& local_path,
                       const std::string& artifact_path);

  /// One call of the REST API: `method` GET or POST to <uri>/api/2.0/mlflow/<endpoint> with a JSON body
  /// (POST) or query (GET, already encoded); the parsed JSON answer as text. Throws MlflowError.
  std::string call(const std::string& method, const std::string& endpoint, const std::string& json_or_query);

 private:
  MlflowServer server_;
};

/// What RunLogger does when the server does not answer: its spool file, retries and probes.
using RunLoggerOptions = DeliveryOptions;

/// A run's logging off the caller's thread (tracking/delivery.h). Calls return at once; requests are sent in
/// order by one thread, consecutive metrics/params/tags merged into log-batch calls within the limits. A
/// request the server does not answer (MlflowError::retriable) is retried with backoff for retry_seconds,
/// then it and every later request go to the spool file (one warning) until a probe gets through again; a
/// request the server refuses (4xx) is dropped with a warning, not spooled. Nothing here blocks or throws to
/// the caller.
class RunLogger {
 public:
  RunLogger(MlflowClient client, RunInfo run, RunLoggerOptions options);
  ~RunLogger();  // close(10)
  RunLogger(const RunLogger&) = delete;
  RunLogger& operator=(const RunLogger&) = delete;

  const RunInfo& run() const;
  void log_metrics(std::vector<Metric> metrics);
  void log_params(std::vector<KeyValue> params);
  void set_tags(std::vector<KeyValue> tags);
  /// Uploads `local_path` as <artifact_dir>/<its file name> ("" = the root) when its turn comes (the file
  /// as it is then; a file gone by then is a warning).
  void log_artifact(const std::string& local_path, const std::string& artifact_dir = "");
  void set_status(RunStatus status, int64_t end_time_ms);
  /// Waits until every request so far is sent or spooled, at most `timeout_s`, then spools what is left
  /// (the request in flight is abandoned and spooled too). No more requests after it.
  void close(double timeout_s);
  /// Requests written to the spool file by this logger so far.
  int64_t spooled() const;
  /// Requests the server took so far (log-batch calls, status updates, uploads).
  int64_t sent() const;
  /// CPU seconds its thread has used so far (what the logging costs the process beside the caller's own
  /// calls).
  double cpu_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// An MLflow spool file replayed with `client` (tracking/delivery.h's replay_spool).
SpoolReplay replay_spool(MlflowClient& client, const std::string& spool_path,
                         const std::function<void(const std::string&)>& warn);

}  // namespace ranzcr::tracking
