// apps/trackers.h: a job's trackers picked from the config, and their environment and command line.
#include "apps/trackers.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/check.h"
#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"
#include "engine/report/tracked_run.h"
#include "ranzcr_git_commit.h"
#include "tracking/mlflow/mlflow_tracker.h"
#include "tracking/tensorboard/event_file.h"

namespace fs = std::filesystem;

namespace ranzcr {

struct TrackingSetup::Impl {
  std::optional<tracking::MlflowSettings> mlflow;  // output.mlflow set
};

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// MLflow's tags for where a run comes from, and the program's version.
std::vector<tracking::KeyValue> program_tags() {
  std::vector<tracking::KeyValue> tags{
      {"mlflow.source.name", "ranzcr"}, {"mlflow.source.type", "LOCAL"}, {"ranzcr.version", RANZCR_VERSION}};
  if (std::string(RANZCR_GIT_COMMIT).size()) tags.emplace_back("mlflow.source.git.commit", RANZCR_GIT_COMMIT);
  std::string user = env("USER");
  if (user.empty()) user = env("LOGNAME");
  if (!user.empty()) tags.emplace_back("mlflow.user", user);
  return tags;
}

// The server of `uri`, or of MLFLOW_TRACKING_URI when `uri` is "" or "env" ("" when neither is set), with
// the credentials of the environment.
tracking::MlflowServer mlflow_server(const std::string& uri) {
  tracking::MlflowServer s;
  s.uri = uri.empty() || uri == "env" ? env("MLFLOW_TRACKING_URI") : uri;
  while (!s.uri.empty() && s.uri.back() == '/') s.uri.pop_back();
  s.username = env("MLFLOW_TRACKING_USERNAME");
  s.password = env("MLFLOW_TRACKING_PASSWORD");
  s.token = env("MLFLOW_TRACKING_TOKEN");
  return s;
}

tracking::MlflowSettings mlflow_settings(const Config& config) {
  tracking::MlflowSettings s;
  s.server = mlflow_server(config.output.mlflow);
  RANZCR_CHECK(!s.server.uri.empty(),
               "output.mlflow is env, but MLFLOW_TRACKING_URI is not set (export it, e.g. "
               "MLFLOW_TRACKING_URI=http://mlflow.example:5000, or give the URI in output.mlflow)");
  const std::string& u = s.server.uri;
  RANZCR_CHECK(u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0, "MLFLOW_TRACKING_URI is '", u,
               "': ranzcr logs to an MLflow tracking server over HTTP (http(s)://host:port), not to a "
               "local store or Databricks");
  s.experiment = config.output.mlflow_experiment;
  s.run_name = config.output.mlflow_run_name;
  s.required = config.output.mlflow_required;
  s.tags = program_tags();
  return s;
}

tracking::TrackerLog tracker_log(RunLog& log) {
  return {[&log](const std::string& line) { log.info(line); },
          [&log](const std::string& line) { log.warn(line); }};
}

// The folder whose spool evaluate uses: the checkpoint's run folder (<run>/checkpoints/x.pt), else the
// current one.
std::string run_folder_of(const std::string& checkpoint) {
  const fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.filename() == run_folder::kCheckpoints) return dir.parent_path().string();
  return ".";
}

}  // namespace

TrackingSetup tracking_setup(Config& config, const std::string& config_path) {
  if (config.output.mlflow_experiment.empty())
    config.output.mlflow_experiment = fs::path(config_path).stem().string();
  auto impl = std::make_shared<TrackingSetup::Impl>();
  if (!config.output.mlflow.empty()) impl->mlflow = mlflow_settings(config);
  return TrackingSetup{impl};
}

tracking::TrackerFactory tracker_factory(const TrackingSetup& setup, RunLog& log) {
  return [impl = setup.impl, &log](const std::string& command) {
    std::vector<std::unique_ptr<tracking::Tracker>> trackers;
    if (command == "train") trackers.push_back(std::make_unique<tracking::TensorBoardTracker>());
    if (impl && impl->mlflow)
      trackers.push_back(std::make_unique<tracking::MlflowTracker>(*impl->mlflow, tracker_log(log)));
    return trackers;
  };
}

void track_evaluation(const std::string& run_flag, const Config& c, const std::vector<std::string>& paths,
                      const EvalReport& report, RunLog& log) {
  std::string run_id = run_flag;
  int64_t epoch = 0;
  try {
    const CheckpointMeta meta = read_checkpoint_meta(paths.front());
    epoch = meta.epoch;
    const auto own = meta.tracker_run_ids.find("mlflow");
    if (run_id.empty() && paths.size() == 1 && !c.output.mlflow.empty() && own != meta.tracker_run_ids.end())
      run_id = own->second;
  } catch (const std::exception&) {  // an exported .safetensors file: no meta
  }
  if (run_id.empty()) return;
  try {
    tracking::MlflowSettings settings;
    if (c.output.mlflow.empty())
      settings.server = mlflow_server("");
    else
      settings = mlflow_settings(c);
    RANZCR_CHECK(!settings.server.uri.empty(), "--mlflow-run ", run_id,
                 " needs a tracking server: output.mlflow in the config, or MLFLOW_TRACKING_URI");
    tracking::MlflowTracker run(settings, tracker_log(log));
    run.attach(run_id, run_folder_of(paths.front()));
    std::vector<tracking::Figure> figures;
    for (const auto& [key, value] : figures_of_json_line(report.json))
      figures.push_back({"eval_" + key, value});
    run.log_figures(figures, epoch);
    for (const auto& file : report.files) run.log_artifact(file, "evaluate");
    run.close(std::nullopt);
  } catch (const std::runtime_error& e) {
    if (!run_flag.empty()) throw;
    log.warn(std::string("evaluate: not logged to the model's MLflow run: ") + e.what());
  }
}

void add_evaluate_tracker_option(CLI::App& evaluate, std::string& run_id) {
  evaluate.add_option(
      "--mlflow-run", run_id,
      "Add the figures and files to this MLflow run (default: the checkpoint's own run when its "
      "config has output.mlflow; the server: output.mlflow or MLFLOW_TRACKING_URI)");
}

CLI::App* add_tracker_sync_command(CLI::App& app, std::string& dir) {
  auto* sync =
      app.add_subcommand("mlflow-sync", std::string("Send a run folder's spooled MLflow requests (") +
                                            tracking::kMlflowSpoolFile + ") to its tracking server");
  sync->add_option("RUN_DIR", dir, "Run folder (output.dir) or cv folder")->required();
  return sync;
}

int run_tracker_sync(const std::string& run_dir) {
  RunLog log;
  std::vector<std::string> dirs{run_dir};
  if (fs::is_directory(run_dir))
    for (const auto& entry : fs::directory_iterator(run_dir))
      if (entry.is_directory() && run_folder::fold_number(entry.path().filename().string()))
        dirs.push_back(entry.path().string());
  const tracking::SpoolSync sync = tracking::sync_mlflow_spools(dirs, mlflow_server(""), tracker_log(log));
  RANZCR_CHECK(sync.files > 0 || fs::is_directory(run_dir), run_dir, " is not a run folder");
  if (sync.files == 0)
    log.info("mlflow-sync: " + run_dir + " has nothing to send (no " + tracking::kMlflowSpoolFile + ")");
  RANZCR_CHECK(sync.left == 0, "mlflow-sync: ", sync.left, " requests are still spooled in ", run_dir,
               " (the server did not answer): run it again later");
  return 0;
}

}  // namespace ranzcr
