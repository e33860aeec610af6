// engine/report/mlflow_run.h: a run folder's MLflow run.
#include "engine/report/mlflow_run.h"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/durable_file.h"
#include "core/text.h"
#include "engine/io/run_folder.h"

namespace fs = std::filesystem;

namespace ranzcr {

using tracking::KeyValue;
using tracking::MlflowClient;
using tracking::MlflowError;
using tracking::RunInfo;
using tracking::RunLogger;

namespace {

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

// A YAML node as one parameter value: scalars as written, lists and maps in flow style.
std::string yaml_value(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return "";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

void flatten(const YAML::Node& node, const std::string& prefix, std::vector<KeyValue>& out) {
  for (const auto& item : node) {
    const std::string key = prefix + item.first.as<std::string>();
    if (item.second.IsMap())
      flatten(item.second, key + ".", out);
    else
      out.emplace_back(key, yaml_value(item.second));
  }
}

// Every resolved config key with its value, as config.yaml has them.
std::vector<KeyValue> config_params(const Config& config) {
  std::vector<KeyValue> params;
  flatten(YAML::Load(config_to_yaml(config)), "", params);
  return params;
}

struct FolderRecord {
  std::string uri, run_id;
};

FolderRecord read_folder_record(const std::string& run_dir) {
  std::ifstream in(run_folder::mlflow_run_file(run_dir));
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
  write_file_atomic(run_folder::mlflow_run_file(run_dir), j.dump(2) + "\n");
}

bool no_such_run(const MlflowError& e) {
  return e.status() == 404 || e.error_code() == "RESOURCE_DOES_NOT_EXIST";
}

// The run to continue: the checkpoint's, else (no checkpoint yet) the folder's of this server; "" = none.
std::string run_to_continue(const MlflowStart& start, const std::string& uri) {
  if (!start.resume_id.empty()) return start.resume_id;
  if (!start.continue_folder_run) return "";
  const FolderRecord record = read_folder_record(start.run_dir);
  return record.uri == uri ? record.run_id : "";
}

std::string experiment_name(const Config& config) {
  return config.output.mlflow_experiment.empty() ? "ranzcr" : config.output.mlflow_experiment;
}

// Epoch records as metrics at step = epoch, sent once the epoch's checkpoints are saved: a record trained
// again after a resume (the process died before its save) never reaches the server twice.
class EpochMetrics : public MetricsWriter {
 public:
  explicit EpochMetrics(RunLogger& logger) : logger_(logger) {}
  void epoch(const EpochRecord& r) override {
    pending_.clear();
    pending_epoch_ = r.epoch;
    const int64_t time = now_ms();
    for (const auto& [key, value] : metrics_of_json_line(epoch_json_line(r)))
      pending_.push_back({key, value, time, r.epoch});
  }
  void saved(int64_t epoch) override {
    if (epoch == pending_epoch_ && !pending_.empty()) logger_.log_metrics(std::move(pending_));
    pending_.clear();
  }

 private:
  RunLogger& logger_;
  std::vector<tracking::Metric> pending_;
  int64_t pending_epoch_ = 0;
};

}  // namespace

struct MlflowRun::State {
  State(const MlflowSetup& setup, RunLog& l, std::string spool_file)
      : client(setup.server), log(l), close_timeout_s(setup.close_timeout_s), spool(std::move(spool_file)) {}
  MlflowClient client;
  RunLog& log;
  double close_timeout_s = 15;
  std::string spool;
  bool attached = false;
  std::unique_ptr<RunLogger> logger;
  bool ended = false;

  void start_logger(const RunInfo& run) {
    tracking::RunLoggerOptions o;
    o.spool_path = spool;
    RunLog* l = &log;
    o.warn = [l](const std::string& line) { l->warn("mlflow: " + line); };
    logger = std::make_unique<RunLogger>(client, run, o);
  }
  // The spool an earlier start left, before anything new.
  void send_spool() {
    if (!fs::exists(spool)) return;
    const tracking::SpoolReplay r = tracking::replay_spool(
        client, spool, [this](const std::string& line) { log.warn("mlflow: " + line); });
    log.info("mlflow: sent " + std::to_string(r.sent) + " requests an earlier start had spooled" +
             (r.left ? "; " + std::to_string(r.left) + " still wait in " + spool : ""));
  }
};

MlflowRun::MlflowRun(std::unique_ptr<State> state) : state_(std::move(state)) {}

MlflowRun::~MlflowRun() {
  if (!state_ || state_->ended) return;
  try {
    finish(state_->attached ? std::nullopt
                            : std::optional<tracking::RunStatus>(tracking::RunStatus::kFailed));
  } catch (const std::exception&) {
  }
}

namespace {

// A new run's parameters: the short ones as parameters, the long ones as files params/<key>.txt.
void log_new_params(RunLogger& logger, const std::vector<KeyValue>& params, const std::string& run_dir) {
  std::vector<KeyValue> short_ones;
  for (const auto& [key, value] : params) {
    if (value.size() <= tracking::kMaxParamValueLength) {
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
                        RunLog& log) {
  std::map<std::string, std::string> had(run.params.begin(), run.params.end());
  std::vector<KeyValue> missing;
  std::vector<std::string> changed;
  for (const auto& [key, value] : params) {
    const auto it = had.find(key);
    if (it == had.end() && value.size() <= tracking::kMaxParamValueLength)
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

std::unique_ptr<MlflowRun> MlflowRun::open(const Config& config, const MlflowSetup& setup,
                                           const MlflowStart& start, RunLog& log) {
  if (config.output.mlflow.empty()) return nullptr;
  const auto opened = std::chrono::steady_clock::now();
  auto s = std::make_unique<State>(setup, log, run_folder::mlflow_spool_file(start.run_dir));
  const std::string& uri = setup.server.uri;
  const std::string experiment = experiment_name(config);
  RunInfo run;
  bool continued = false;
  try {
    s->send_spool();
    const std::string experiment_id = s->client.experiment_id(experiment);
    if (const std::string id = run_to_continue(start, uri); !id.empty()) {
      try {
        run = s->client.get_run(id);
        continued = true;
      } catch (const MlflowError& e) {
        if (!no_such_run(e)) throw;
        log.warn("mlflow: " + uri + " has no run " + id +
                 " (the one this run logged to): starting a new one");
      }
    }
    if (!continued) {
      std::vector<KeyValue> tags = setup.tags;
      tags.insert(tags.end(), start.tags.begin(), start.tags.end());
      tags.emplace_back("ranzcr.command", start.command);
      tags.emplace_back("ranzcr.run_dir", fs::absolute(start.run_dir).lexically_normal().string());
      if (!setup.parent_run_id.empty()) tags.emplace_back("mlflow.parentRunId", setup.parent_run_id);
      const std::string name =
          config.output.mlflow_run_name.empty() ? folder_name(start.run_dir) : config.output.mlflow_run_name;
      run = s->client.create_run(experiment_id, name, now_ms(), tags);
    }
  } catch (const MlflowError& e) {
    RANZCR_CHECK(!config.output.mlflow_required, "output.mlflow: ", e.what(),
                 " (output.mlflow_required: false trains on without tracking when the server is away)");
    log.warn(std::string("output.mlflow: ") + e.what() +
             "; training without MLflow tracking (output.mlflow_required: false)");
    return nullptr;
  }
  write_folder_record(start.run_dir, uri, experiment, run);
  s->start_logger(run);
  const std::vector<KeyValue> params = config_params(config);
  if (continued) {
    s->logger->set_status(tracking::RunStatus::kRunning, 0);
    log_missing_params(*s->logger, run, params, log);
    s->logger->set_tags(start.tags);  // this start's device and world size
  } else {
    log_new_params(*s->logger, params, start.run_dir);
  }
  char took[48];
  std::snprintf(took, sizeof took, " (%.2f s)",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count());
  log.info("mlflow: " + std::string(continued ? "continuing" : "logging to") + " run " + run.run_id +
           " of experiment '" + experiment + "': " + uri + "/#/experiments/" + run.experiment_id + "/runs/" +
           run.run_id + took);
  return std::unique_ptr<MlflowRun>(new MlflowRun(std::move(s)));
}

std::unique_ptr<MlflowRun> MlflowRun::attach(const MlflowSetup& setup, const std::string& run_id,
                                             const std::string& spool_dir, RunLog& log) {
  auto s = std::make_unique<State>(setup, log, run_folder::mlflow_spool_file(spool_dir));
  s->attached = true;
  RunInfo run;
  try {
    run = s->client.get_run(run_id);
  } catch (const MlflowError& e) {
    RANZCR_FAIL("MLflow run ", run_id, ": ", e.what());
  }
  s->start_logger(run);
  log.info("mlflow: adding to run " + run_id + ": " + setup.server.uri + "/#/experiments/" +
           run.experiment_id + "/runs/" + run_id);
  return std::unique_ptr<MlflowRun>(new MlflowRun(std::move(s)));
}

const std::string& MlflowRun::run_id() const {
  return state_->logger->run().run_id;
}

std::unique_ptr<MetricsWriter> MlflowRun::epoch_writer() {
  return std::make_unique<EpochMetrics>(*state_->logger);
}

void MlflowRun::log_metrics(const std::vector<std::pair<std::string, double>>& values, int64_t step) {
  std::vector<tracking::Metric> metrics;
  const int64_t time = now_ms();
  for (const auto& [key, value] : values) metrics.push_back({tracking::metric_key(key), value, time, step});
  state_->logger->log_metrics(std::move(metrics));
}

void MlflowRun::log_artifact(const std::string& path, const std::string& dir) {
  if (fs::exists(path)) state_->logger->log_artifact(fs::absolute(path).string(), dir);
}

void MlflowRun::finish(std::optional<tracking::RunStatus> status) {
  State& s = *state_;
  if (s.ended) return;
  s.ended = true;
  if (status && !s.attached) s.logger->set_status(*status, now_ms());
  const auto start = std::chrono::steady_clock::now();
  s.logger->close(s.close_timeout_s);
  char cost[160];
  std::snprintf(
      cost, sizeof cost,
      "mlflow: %lld requests sent (%.3f s of the logger thread's CPU; %.2f s waited for delivery at the "
      "end)",
      static_cast<long long>(s.logger->sent()), s.logger->cpu_seconds(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  s.log.info(cost);
  if (const int64_t n = s.logger->spooled(); n > 0)
    s.log.warn("mlflow: " + std::to_string(n) + " requests did not reach " + s.client.server().uri +
               " and wait in " + s.spool + "; send them with: ranzcr mlflow-sync " +
               fs::path(s.spool).parent_path().string());
}

std::vector<std::pair<std::string, double>> metrics_of_json_line(const std::string& line) {
  std::vector<std::pair<std::string, double>> out;
  const nlohmann::json j = nlohmann::json::parse(line);
  for (const auto& [key, value] : j.items()) {
    if (value.is_number()) out.emplace_back(tracking::metric_key(key), value.get<double>());
    if (!value.is_object()) continue;
    for (const auto& [label, v] : value.items())
      if (v.is_number()) out.emplace_back(tracking::metric_key(key + "/" + label), v.get<double>());
  }
  return out;
}

int64_t sync_mlflow_spools(const std::string& run_dir, const tracking::MlflowServer& server, RunLog& log) {
  std::vector<std::string> dirs{run_dir};
  if (fs::is_directory(run_dir))
    for (const auto& entry : fs::directory_iterator(run_dir))
      if (entry.is_directory() && run_folder::fold_number(entry.path().filename().string()))
        dirs.push_back(entry.path().string());
  int64_t left = 0, files = 0;
  for (const auto& dir : dirs) {
    const std::string spool = run_folder::mlflow_spool_file(dir);
    if (!fs::exists(spool)) continue;
    ++files;
    tracking::MlflowServer to = server;
    if (const FolderRecord record = read_folder_record(dir); !record.uri.empty()) to.uri = record.uri;
    RANZCR_CHECK(!to.uri.empty(), spool, ": no tracking URI (", run_folder::kMlflowRun,
                 " names none): set MLFLOW_TRACKING_URI");
    MlflowClient client(to);
    const tracking::SpoolReplay r = tracking::replay_spool(
        client, spool, [&log](const std::string& line) { log.warn("mlflow: " + line); });
    log.info("mlflow-sync: " + spool + ": " + std::to_string(r.sent) + " requests sent to " + to.uri +
             (r.refused ? ", " + std::to_string(r.refused) + " refused" : "") +
             (r.left ? ", " + std::to_string(r.left) + " left (the server stopped answering)" : ""));
    left += r.left;
  }
  RANZCR_CHECK(files > 0 || fs::is_directory(run_dir), run_dir, " is not a run folder");
  if (files == 0)
    log.info("mlflow-sync: " + run_dir + " has nothing to send (no " + run_folder::kMlflowSpool + ")");
  return left;
}

}  // namespace ranzcr
