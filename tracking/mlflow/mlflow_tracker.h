// MLflow as a Tracker (tracking/tracker.h; tracking/mlflow/mlflow.h does the talking): which MLflow run a
// run folder logs to (its mlflow_run.json, and the checkpoints through the run id), every parameter and the
// tags at the start, each epoch's record as metrics once the epoch's checkpoints are saved, files as
// artifacts and the status at the end. Logging happens on RunLogger's thread; what the server does not take
// goes to the folder's spool, which `ranzcr mlflow-sync` (sync_mlflow_spools) sends later.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracking/mlflow/mlflow.h"
#include "tracking/tracker.h"

namespace ranzcr::tracking {

/// A run folder's MLflow files.
inline constexpr const char* kMlflowRunFile = "mlflow_run.json";       // the run's server and id
inline constexpr const char* kMlflowSpoolFile = "mlflow_spool.jsonl";  // requests the server did not take yet

/// What the MLflow tracker is given (output.mlflow's keys, and what apps reads from the environment).
struct MlflowSettings {
  MlflowServer server;         // the URI (output.mlflow or MLFLOW_TRACKING_URI) and credentials
  std::string experiment;      // output.mlflow_experiment ("" = "ranzcr")
  std::string run_name;        // output.mlflow_run_name ("" = the run folder's name)
  bool required = true;        // output.mlflow_required: a server that does not answer at start stops the job
  std::vector<KeyValue> tags;  // the program's: git commit, version, user, ...
  double close_timeout_s = 15;  // at the end: wait this long for delivery, then spool
};

class MlflowTracker : public Tracker {
 public:
  MlflowTracker(MlflowSettings settings, TrackerLog log);
  ~MlflowTracker() override;  // open and not finished: status FAILED (an exception unwound the run)

  std::string name() const override { return "mlflow"; }
  /// Creates or continues the run in the experiment after sending the folder's spool. A new run gets every
  /// parameter (a value longer than MLflow takes as the artifact params/<key>.txt); a continued one is set
  /// RUNNING and gets the parameters it lacks. False when the server does not answer or refuses and the
  /// settings do not require it (a warning); throws std::runtime_error (one line) when they do.
  bool open(const RunStart& start) override;
  std::string run_id() const override;
  /// Kept until epoch_saved: a record trained again after a resume (the process died before its save)
  /// never reaches the server twice. Step = epoch.
  void log_epoch(const EpochFigures& figures) override;
  void epoch_saved(int64_t epoch) override;
  void log_figures(const std::vector<Figure>& figures, int64_t step) override;
  void log_artifact(const std::string& path, const std::string& dir = "") override;
  void finish(RunStatus status) override;

  /// An existing run, to add figures and files to (evaluate): no parameters, no status at the end. The
  /// spool is `spool_dir`'s. Throws std::runtime_error when the server does not answer or has no such run.
  void attach(const std::string& run_id, const std::string& spool_dir);
  /// Sets the status (none for an attached run), then waits for delivery at most close_timeout_s; what is
  /// left goes to the spool (a warning names `ranzcr mlflow-sync`).
  void close(std::optional<RunStatus> status);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// `ranzcr mlflow-sync`: sends the spools of `dirs` (a run folder, or a cv folder and its folds) to the
/// server each folder's mlflow_run.json names (with `server`'s credentials; its URI when the file names
/// none). Returns {spool files found, requests left (0: all delivered)}.
struct SpoolSync {
  int64_t files = 0, left = 0;
};
SpoolSync sync_mlflow_spools(const std::vector<std::string>& dirs, const MlflowServer& server,
                             const TrackerLog& log);

}  // namespace ranzcr::tracking
