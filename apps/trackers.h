// The one place that picks a job's experiment trackers (tracking/tracker.h) from the config, and the
// trackers' part that reads the environment and the command line: MLflow's as its own clients do (the
// tracking URI, output.mlflow "env" = MLFLOW_TRACKING_URI; the credentials MLFLOW_TRACKING_USERNAME and
// MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN; the program's tags: commit, version, user),
// `evaluate --mlflow-run` and `ranzcr mlflow-sync`. Everything else calls the Tracker interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/eval_outputs.h"
#include "engine/report/run_log.h"
#include "tracking/tracker.h"

namespace CLI {
class App;
}

namespace ranzcr {

/// What a job's trackers are made from, read once before the job starts (so a bad setting fails there).
struct TrackingSetup {
  struct Impl;
  std::shared_ptr<const Impl> impl;
};

/// The tracking set-up of `config` (read from `config_path`), whose defaults it fills in (the experiment:
/// the config file's name). Throws std::runtime_error (one line) for a setting that cannot work
/// (output.mlflow "env" without MLFLOW_TRACKING_URI, a URI that is not an MLflow server's).
TrackingSetup tracking_setup(Config& config, const std::string& config_path);

/// The factory a job hands the engine, the trackers' lines to `log`: for "train", TensorBoard's event
/// files always and MLflow with output.mlflow; for "cv" (the parent of the folds' runs), MLflow only.
tracking::TrackerFactory tracker_factory(const TrackingSetup& setup, RunLog& log);

/// evaluate's figures (eval_auc_mean, eval_auc/<label>, eval_loss, ...) and files into a tracker's run:
/// `run_id` (evaluate --mlflow-run), else the one model's own run when its config tracks. A failure is an
/// error with `run_id`, a warning without (evaluate's own files are written either way).
void track_evaluation(const std::string& run_id, const Config& c, const std::vector<std::string>& paths,
                      const EvalReport& report, RunLog& log);

/// The trackers' command-line parts: evaluate's option naming the run to add to (into `run_id`), and the
/// command that sends a run folder's spooled requests (its folder into `dir`), which it returns.
void add_evaluate_tracker_option(CLI::App& evaluate, std::string& run_id);
CLI::App* add_tracker_sync_command(CLI::App& app, std::string& dir);
/// That command: sends the spooled requests of a run (or cv) folder; non-zero when some are left.
int run_tracker_sync(const std::string& run_dir);

}  // namespace ranzcr
