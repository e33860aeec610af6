// tracking/mlflow/mlflow_tracker.h: a run folder's MLflow run.
#include "tracking/mlflow/mlflow_tracker.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "core/durable_file.h"
#include "core/text.h"

namespace fs = std::filesystem;

namespace ranzcr::tracking {

namespace {

std::string run_file(const std::string& dir) {
  return (fs::path(dir) / kMlflowRunFile).string();
}
std::string spool_file(const std::string& dir) {
  return (fs::path(dir) / kMlflowSpoolFile).string();
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The folder's own name ("runs/x/" -> "x").
std::string folder_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return fs::absolute(p).filename().string();
}

struct FolderRecord {
  std::string uri, run_id;
};

FolderRecord read_folder_record(const std::string& run_dir) {
  std::ifstream in(run_file(run_dir));
  if (!in) return {};
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return {j.value("tracking_uri", ""), j.value("run_id", "")};
  } catch (const std::exception&) {
    return {};  // unreadable: a new run, and the file is rewritten
  }
}

void write_folder_record(const std::string& run_dir, const std::string& uri, const std::string& experiment,
                         const RunInfo& run) {
  const nlohmann::json j = {{"tracking_uri", uri},
                            {"experiment_name", experiment},
                            {"experiment_id", run.experiment_id},
                            {"run_id", run.run_id}};
  write_file_atomic(run_file(run_dir), j.dump(2) + "\n");
}

bool no_such_run(const MlflowError& e) {
  return e.status() == 404 || e.error_code() == "RESOURCE_DOES_NOT_EXIST";
}

// The run to continue: the checkpoint's, else (no checkpoint yet) the folder's of this server; "" = none.
std::string run_to_continue(const RunStart& start, const std::string& uri) {
  if (!start.resume_id.empty()) return start.resume_id;
  if (!start.continue_folder_run) return "";
  const FolderRecord record = read_folder_record(start.run_dir);
  return record.uri == uri ? record.run_id : "";
}

std::vector<Metric> metrics_at(const std::vector<Figure>& figures, int64_t step) {
  std::vector<Metric> metrics;
  const int64_t time = now_ms();
  for (const auto& f : figures) metrics.push_back({metric_key(f.key), f.value, time, step});
  return metrics;
}

// A new run's parameters: the short ones as parameters, the long ones as files params/<key>.txt.
void log_new_params(RunLogger& logger, const std::vector<KeyValue>& params, const std::string& run_dir) {
  std::vector<KeyValue> short_ones;
  for (const auto& [key, value] : params) {
    if (value.size() <= kMaxParamValueLength) {
      short_ones.emplace_back(key, value);
      continue;
    }
    const std::string file = (fs::path(run_dir) / "mlflow_params" / (key + ".txt")).string();
    fs::create_directories(fs::path(file).parent_path());
    write_file_atomic(file, value);
    logger.log_artifact(file, "params");
  }
  logger.log_params(std::move(short_ones));
}

// A continued run: the parameters it lacks; a changed value stays as MLflow has it (it keeps one per key).
void log_missing_params(RunLogger& logger, const RunInfo& run, const std::vector<KeyValue>& params,
                        const TrackerLog& log) {
  std::map<std::string, std::string> had(run.params.begin(), run.params.end());
  std::vector<KeyValue> missing;
  std::vector<std::string> changed;
  for (const auto& [key, value] : params) {
    const auto it = had.find(key);
    if (it == had.end() && value.size() <= kMaxParamValueLength)
      missing.emplace_back(key, value);
    else if (it != had.end() && it->second != value)
      changed.push_back(key);
  }
  if (!changed.empty())
    log.warn("mlflow: the run keeps its first value of " + join(changed, ", ") +
             " (MLflow parameters cannot change; the run folder's config.yaml has the new ones)");
  if (!missing.empty()) logger.log_params(std::move(missing));
}

}  // namespace

struct MlflowTracker::State {
  State(MlflowSettings s, TrackerLog l)
      : settings(std::move(s)), client(settings.server), log(std::move(l)) {}
  MlflowSettings settings;
  MlflowClient client;
  TrackerLog log;
  std::string spool;
  bool attached = false;
  std::unique_ptr<RunLogger> logger;
  bool ended = false;
  std::vector<Metric> pending;  // the last epoch's record, until its checkpoints are saved
  int64_t pending_epoch = 0;

  void warn(const std::string& line) const {
    if (log.warn) log.warn("mlflow: " + line);
  }
  void info(const std::string& line) const {
    if (log.info) log.info("mlflow: " + line);
  }
  void start_logger(const RunInfo& run) {
    RunLoggerOptions o;
    o.spool_path = spool;
    o.warn = [this](const std::string& line) { warn(line); };
    logger = std::make_unique<RunLogger>(client, run, o);
  }
  // The spool an earlier start left, before anything new.
  void send_spool() {
    if (!fs::exists(spool)) return;
    const SpoolReplay r = replay_spool(client, spool, [this](const std::string& line) { warn(line); });
    info("sent " + std::to_string(r.sent) + " requests an earlier start had spooled" +
         (r.left ? "; " + std::to_string(r.left) + " still wait in " + spool : ""));
  }
  std::string experiment() const { return settings.experiment.empty() ? "ranzcr" : settings.experiment; }
  // The run of `start`: continued (true) or created. Throws MlflowError.
  std::pair<RunInfo, bool> find_or_create(const RunStart& start);
};

std::pair<RunInfo, bool> MlflowTracker::State::find_or_create(const RunStart& start) {
  const std::string& uri = settings.server.uri;
  send_spool();
  const std::string experiment_id = client.experiment_id(experiment());
  if (const std::string id = run_to_continue(start, uri); !id.empty()) {
    try {
      return {client.get_run(id), true};
    } catch (const MlflowError& e) {
      if (!no_such_run(e)) throw;
      warn(uri + " has no run " + id + " (the one this run logged to): starting a new one");
    }
  }
  std::vector<KeyValue> tags = settings.tags;
  tags.insert(tags.end(), start.tags.begin(), start.tags.end());
  tags.emplace_back("ranzcr.command", start.command);
  tags.emplace_back("ranzcr.run_dir", fs::absolute(start.run_dir).lexically_normal().string());
  if (!start.parent_run_id.empty()) tags.emplace_back("mlflow.parentRunId", start.parent_run_id);
  const std::string name = settings.run_name.empty() ? folder_name(start.run_dir) : settings.run_name;
  return {client.create_run(experiment_id, name, now_ms(), tags), false};
}

MlflowTracker::MlflowTracker(MlflowSettings settings, TrackerLog log)
    : state_(std::make_unique<State>(std::move(settings), std::move(log))) {}

MlflowTracker::~MlflowTracker() {
  if (!state_->logger || state_->ended) return;
  try {
    close(state_->attached ? std::nullopt : std::optional<RunStatus>(RunStatus::kFailed));
  } catch (const std::exception&) {
  }
}

bool MlflowTracker::open(const RunStart& start) {
  State& s = *state_;
  const auto opened = std::chrono::steady_clock::now();
  s.spool = spool_file(start.run_dir);
  RunInfo run;
  bool continued = false;
  try {
    std::tie(run, continued) = s.find_or_create(start);
  } catch (const MlflowError& e) {
    RANZCR_CHECK(!s.settings.required, "output.mlflow: ", e.what(),
                 " (output.mlflow_required: false trains on without tracking when the server is away)");
    if (s.log.warn)
      s.log.warn(std::string("output.mlflow: ") + e.what() +
                 "; training without MLflow tracking (output.mlflow_required: false)");
    return false;
  }
  write_folder_record(start.run_dir, s.settings.server.uri, s.experiment(), run);
  s.start_logger(run);
  if (continued) {
    s.logger->set_status(RunStatus::kRunning, 0);
    log_missing_params(*s.logger, run, start.params, s.log);
    s.logger->set_tags(start.tags);  // this start's device and world size
  } else {
    log_new_params(*s.logger, start.params, start.run_dir);
  }
  char took[48];
  std::snprintf(took, sizeof took, " (%.2f s)",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count());
  s.info(std::string(continued ? "continuing" : "logging to") + " run " + run.run_id + " of experiment '" +
         s.experiment() + "': " + s.settings.server.uri + "/#/experiments/" + run.experiment_id + "/runs/" +
         run.run_id + took);
  return true;
}

void MlflowTracker::attach(const std::string& run_id, const std::string& spool_dir) {
  State& s = *state_;
  s.attached = true;
  s.spool = spool_file(spool_dir);
  RunInfo run;
  try {
    run = s.client.get_run(run_id);
  } catch (const MlflowError& e) {
    RANZCR_FAIL("MLflow run ", run_id, ": ", e.what());
  }
  s.start_logger(run);
  s.info("adding to run " + run_id + ": " + s.settings.server.uri + "/#/experiments/" + run.experiment_id +
         "/runs/" + run_id);
}

std::string MlflowTracker::run_id() const {
  return state_->logger ? state_->logger->run().run_id : "";
}

void MlflowTracker::log_epoch(const EpochFigures& figures) {
  state_->pending = metrics_at(figures.record, figures.epoch);
  state_->pending_epoch = figures.epoch;
}

void MlflowTracker::epoch_saved(int64_t epoch) {
  State& s = *state_;
  if (epoch == s.pending_epoch && !s.pending.empty()) s.logger->log_metrics(std::move(s.pending));
  s.pending.clear();
}

void MlflowTracker::log_figures(const std::vector<Figure>& figures, int64_t step) {
  state_->logger->log_metrics(metrics_at(figures, step));
}

void MlflowTracker::log_artifact(const std::string& path, const std::string& dir) {
  if (fs::exists(path)) state_->logger->log_artifact(fs::absolute(path).string(), dir);
}

void MlflowTracker::finish(RunStatus status) {
  close(status);
}

void MlflowTracker::close(std::optional<RunStatus> status) {
  State& s = *state_;
  if (s.ended || !s.logger) return;
  s.ended = true;
  if (status && !s.attached) s.logger->set_status(*status, now_ms());
  const auto start = std::chrono::steady_clock::now();
  s.logger->close(s.settings.close_timeout_s);
  char cost[160];
  std::snprintf(
      cost, sizeof cost,
      "%lld requests sent (%.3f s of the logger thread's CPU; %.2f s waited for delivery at the end)",
      static_cast<long long>(s.logger->sent()), s.logger->cpu_seconds(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  s.info(cost);
  if (const int64_t n = s.logger->spooled(); n > 0)
    s.warn(std::to_string(n) + " requests did not reach " + s.client.server().uri + " and wait in " +
           s.spool + "; send them with: ranzcr mlflow-sync " + fs::path(s.spool).parent_path().string());
}

SpoolSync sync_mlflow_spools(const std::vector<std::string>& dirs, const MlflowServer& server,
                             const TrackerLog& log) {
  SpoolSync sync;
  const auto warn = [&log](const std::string& line) {
    if (log.warn) log.warn("mlflow: " + line);
  };
  for (const auto& dir : dirs) {
    const std::string spool = spool_file(dir);
    if (!fs::exists(spool)) continue;
    ++sync.files;
    MlflowServer to = server;
    if (const FolderRecord record = read_folder_record(dir); !record.uri.empty()) to.uri = record.uri;
    RANZCR_CHECK(!to.uri.empty(), spool, ": no tracking URI (", kMlflowRunFile,
                 " names none): set MLFLOW_TRACKING_URI");
    MlflowClient client(to);
    const SpoolReplay r = replay_spool(client, spool, warn);
    if (log.info)
      log.info("mlflow-sync: " + spool + ": " + std::to_string(r.sent) + " requests sent to " + to.uri +
               (r.refused ? ", " + std::to_string(r.refused) + " refused" : "") +
               (r.left ? ", " + std::to_string(r.left) + " left (the server stopped answering)" : ""));
    sync.left += r.left;
  }
  return sync;
}

}  // namespace ranzcr::tracking
