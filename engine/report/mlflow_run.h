// A run's record in an MLflow tracking server (output.mlflow; tracking/mlflow.h does the talking): which
// MLflow run a run folder logs to (its mlflow_run.json and its checkpoints keep the id), every resolved
// config key as a parameter and the tags at the start, each epoch record's figures as metrics once the
// epoch's checkpoints are saved, files as artifacts and the status at the end. Main rank only; logging
// happens on the logger's thread, and what the server does not take goes to the folder's spool
// (run_folder.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/metrics_writer.h"
#include "engine/report/run_log.h"
#include "tracking/mlflow.h"

namespace ranzcr {

/// What apps knows of the MLflow side (library code reads no environment).
struct MlflowSetup {
  tracking::MlflowServer server;         // the URI (output.mlflow or MLFLOW_TRACKING_URI) and credentials
  std::vector<tracking::KeyValue> tags;  // the program's: git commit, version, user, ...
  std::string parent_run_id;             // the folds of `cv`: the cv run's (tag mlflow.parentRunId)
  double close_timeout_s = 15;           // at the end: wait this long for delivery, then spool
};

/// Where a run's MLflow run comes from.
struct MlflowStart {
  std::string run_dir;               // the run (or cv root) folder: mlflow_run.json, the spool
  std::string resume_id;             // the run id of the checkpoint resumed ("" = none)
  bool continue_folder_run = false;  // no checkpoint yet: continue the folder's mlflow_run.json run, if any
  std::string command;               // "train", "cv": tag ranzcr.command
  std::vector<tracking::KeyValue> tags;  // the job's: device, world size, model
};

class MlflowRun {
 public:
  /// Creates or continues the run of `start` in output.mlflow_experiment (run name output.mlflow_run_name,
  /// else the folder's name) after sending the folder's spool. A new run gets every config key as a parameter
  /// (a value longer than MLflow takes as the artifact params/<key>.txt); a continued one is set RUNNING and
  /// gets the keys it lacks. Null when output.mlflow is off, or when the server does not answer or refuses
  /// and output.mlflow_required is false (a warning). Throws std::runtime_error (one line) when it is
  /// required.
  static std::unique_ptr<MlflowRun> open(const Config& config, const MlflowSetup& setup,
                                         const MlflowStart& start, RunLog& log);
  /// An existing run, to add figures and files to (evaluate --mlflow-run): no parameters, no status. Throws
  /// std::runtime_error when the server does not answer or has no such run.
  static std::unique_ptr<MlflowRun> attach(const MlflowSetup& setup, const std::string& run_id,
                                           const std::string& spool_dir, RunLog& log);
  ~MlflowRun();  // not finished: status FAILED (an exception unwound the run)
  MlflowRun(const MlflowRun&) = delete;
  MlflowRun& operator=(const MlflowRun&) = delete;

  const std::string& run_id() const;
  /// Each epoch record's figures (every number of the metrics file's line; per-label AUCs as
  /// val_auc/<label>) as metrics at step = epoch, sent when the epoch's checkpoints are saved.
  std::unique_ptr<MetricsWriter> epoch_writer();
  void log_metrics(const std::vector<std::pair<std::string, double>>& values, int64_t step);
  /// Uploaded (when it exists) as <dir>/<file name>.
  void log_artifact(const std::string& path, const std::string& dir = "");
  /// Sets the status (none for an attached run), then waits for delivery at most close_timeout_s; what is
  /// left goes to the spool (a warning names `ranzcr mlflow-sync`).
  void finish(std::optional<tracking::RunStatus> status);

 private:
  struct State;
  explicit MlflowRun(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// The metrics of one metrics-file line (epoch_json_line): its numbers by key, objects flattened as
/// key/label; nulls (an undefined AUC) left out.
std::vector<std::pair<std::string, double>> metrics_of_json_line(const std::string& line);

/// `ranzcr mlflow-sync`: sends the spool of `run_dir` and of its fold folders to the server their
/// mlflow_run.json names (with `server`'s credentials; its URI when the file names none). Returns the
/// requests left (0: all delivered).
int64_t sync_mlflow_spools(const std::string& run_dir, const tracking::MlflowServer& server, RunLog& log);

}  // namespace ranzcr
