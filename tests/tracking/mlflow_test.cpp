// tracking/: MlflowClient and RunLogger against a real MLflow tracking server (tests/mlflow_server.h: the
// .venv's `mlflow server`, SQLite store, proxied artifacts), read back with MLflow's own Python client
// (tests/tracking/mlflow_check.py); the server stopped and started again for the spool; the requests
// themselves (batch sizes, credentials) seen by a recording HTTP server.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>

#include "tests/mlflow_server.h"
#include "tracking/mlflow/mlflow.h"

namespace fs = std::filesystem;

namespace ranzcr::test {
namespace {

using tracking::KeyValue;
using tracking::Metric;
using tracking::MlflowClient;
using tracking::MlflowError;
using tracking::MlflowServer;
using tracking::RunInfo;
using tracking::RunLogger;
using tracking::RunLoggerOptions;
using tracking::RunStatus;

constexpr int64_t kT0 = 1'700'000'000'000;  // metric timestamps (ms)

// Warning lines collected from RunLogger / replay_spool.
struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(l);
    };
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mu);
    return lines;
  }
  int count(const std::string& part) {
    int n = 0;
    for (const auto& l : all()) n += contains(l, part);
    return n;
  }
};

std::vector<Metric> loss_curve(const std::string& key, int first_step, int steps) {
  std::vector<Metric> m;
  for (int s = first_step; s < first_step + steps; ++s)
    m.push_back({key, 1.0 / (s + 1) + 0.1 * s, kT0 + s, s});
  return m;
}

// A metric value of mlflow_check.py's JSON ("NaN", "Infinity" or a number).
double value_of(const nlohmann::json& v) {
  if (v.is_string()) {
    if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
    return v == "Infinity" ? std::numeric_limits<double>::infinity()
                           : -std::numeric_limits<double>::infinity();
  }
  return v.get<double>();
}

// Expects the history of `key` in `run` (mlflow_check.py run ... KEY) to be `expected`, in step order.
void expect_history(const nlohmann::json& run, const std::string& key, std::vector<Metric> expected) {
  const nlohmann::json& h = run["history"][key];
  ASSERT_EQ(h.size(), expected.size()) << key << ": " << h.dump().substr(0, 500);
  std::vector<nlohmann::json> got(h.begin(), h.end());
  std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a["step"] < b["step"]; });
  std::sort(expected.begin(), expected.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(got[i]["step"].get<int64_t>(), expected[i].step);
    EXPECT_EQ(got[i]["timestamp"].get<int64_t>(), expected[i].timestamp_ms);
    const double v = value_of(got[i]["value"]);
    if (std::isnan(expected[i].value))
      EXPECT_TRUE(std::isnan(v)) << key << " step " << expected[i].step;
    else
      EXPECT_EQ(v, expected[i].value) << key << " step " << expected[i].step;
  }
}

int count_lines(const std::string& path) {
  const std::string text = read_file(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// One suite server per test process (each test is a process under ctest).
class Mlflow : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (mlflow_available()) server_ = new MlflowTestServer();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) RANZCR_SKIP_WITHOUT_REFERENCE("no mlflow in .venv");
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static MlflowClient client() { return MlflowClient(MlflowServer{server_->uri()}); }
  static RunInfo new_run(const std::string& experiment, const std::string& name) {
    MlflowClient c = client();
    return c.create_run(c.experiment_id(experiment), name, kT0, {{"origin", "test"}});
  }
  static inline MlflowTestServer* server_ = nullptr;
};

TEST(MetricKey, AsMlflowAcceptsIt) {
  EXPECT_EQ(tracking::metric_key("val/auc"), "val/auc");
  EXPECT_EQ(tracking::metric_key("loss (train)"), "loss _train_");
  EXPECT_EQ(tracking::metric_key("auc:ETT - Abnormal"), "auc_ETT - Abnormal");
  EXPECT_EQ(tracking::metric_key("lr.group-0_x"), "lr.group-0_x");
  EXPECT_EQ(tracking::metric_key("/a//b/"), "a/b");
  EXPECT_EQ(tracking::metric_key("./a/../b"), "_/a/_/b");
  EXPECT_EQ(tracking::metric_key("é"), "__");
  EXPECT_EQ(tracking::metric_key(""), "_");
  EXPECT_EQ(tracking::metric_key(std::string(300, 'k')), std::string(tracking::kMaxKeyLength, 'k'));
  EXPECT_STREQ(tracking::status_name(RunStatus::kFinished), "FINISHED");
  EXPECT_STREQ(tracking::status_name(RunStatus::kKilled), "KILLED");
}

TEST_F(Mlflow, RunLoggedAndReadBackByMlflowsClient) {
  MlflowClient c = client();
  const std::string exp = c.experiment_id("ranzcr tests/å");
  EXPECT_EQ(c.experiment_id("ranzcr tests/å"), exp);  // found, not made again
  RunInfo run = c.create_run(exp, "fold 0", kT0, {{"mlflow.source.name", "ranzcr"}, {"fold", "0"}});
  EXPECT_EQ(run.status, "RUNNING");
  EXPECT_EQ(run.experiment_id, exp);
  EXPECT_EQ(run.artifact_uri, "mlflow-artifacts:/" + exp + "/" + run.run_id + "/artifacts");

  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<Metric> loss = loss_curve("train/loss", 0, 5);
  loss.push_back({"train/loss", nan, kT0 + 5, 5});
  std::vector<Metric> special = {{"odd", inf, kT0, 0},
                                 {"odd", -inf, kT0 + 1, 1},
                                 {"odd", 1e-300, kT0 + 2, 2},
                                 {"odd", -0.1, kT0 + 3, 3}};
  std::vector<Metric> all = loss;
  all.insert(all.end(), special.begin(), special.end());
  const std::string long_value(7000, 'v');
  c.log_batch(run.run_id, all, {{"lr", "0.0003"}, {"model", "tf_efficientnet_b0"}, {"long", long_value}},
              {{"note", "héllo\nworld"}});
  c.update_run(run.run_id, RunStatus::kFinished, kT0 + 60'000);

  const RunInfo back = c.get_run(run.run_id);
  EXPECT_EQ(back.status, "FINISHED");
  EXPECT_NE(std::find(back.params.begin(), back.params.end(), KeyValue{"lr", "0.0003"}), back.params.end());

  const nlohmann::json r = server_->check_json("run " + run.run_id + " train/loss odd");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "FINISHED");
  EXPECT_EQ(r["end_time"], kT0 + 60'000);
  EXPECT_EQ(r["start_time"], kT0);
  EXPECT_EQ(r["params"]["lr"], "0.0003");
  EXPECT_EQ(r["params"]["model"], "tf_efficientnet_b0");
  EXPECT_EQ(r["params"]["long"], std::string(tracking::kMaxParamValueLength, 'v'));  // cut to the limit
  EXPECT_EQ(r["tags"]["note"], "héllo\nworld");
  EXPECT_EQ(r["tags"]["fold"], "0");
  EXPECT_EQ(r["tags"]["mlflow.runName"], "fold 0");
  expect_history(r, "train/loss", loss);
  // The SQL store keeps an infinity as ±DBL_MAX (MLflow's own clients read back that number too).
  special[0].value = std::numeric_limits<double>::max();
  special[1].value = -std::numeric_limits<double>::max();
  expect_history(r, "odd", special);
}

TEST_F(Mlflow, SameBatchTwiceIsKeptOnce) {
  MlflowClient c = client();
  const RunInfo run = new_run("dedupe", "twice");
  const std::vector<Metric> m = loss_curve("loss", 0, 20);
  c.log_batch(run.run_id, m, {{"lr", "0.1"}}, {{"t", "1"}});
  c.log_batch(run.run_id, m, {{"lr", "0.1"}}, {{"t", "1"}});  // what a replay after a delivered request does
  const nlohmann::json r = server_->check_json("run " + run.run_id + " loss");
  expect_history(r, "loss", m);
  // A param changed is refused (4xx), not retriable.
  try {
    c.log_batch(run.run_id, {}, {{"lr", "0.2"}}, {});
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.error_code(), "INVALID_PARAMETER_VALUE");
    EXPECT_FALSE(e.retriable());
  }
}

TEST_F(Mlflow, ArtifactsUploadedThroughTheProxy) {
  MlflowClient c = client();
  const RunInfo run = new_run("artifacts", "upload");
  TempDir tmp;
  write_random_file(tmp / "weights.bin", 3'000'001, 7);
  write_file(tmp / "config.yaml", "model:\n  name: tiny_cnn\n");
  c.upload_artifact(run.artifact_uri, tmp / "weights.bin", "checkpoints/best/weights.bin");
  c.upload_artifact(run.artifact_uri, tmp / "config.yaml", "config.yaml");
  fs::create_directories(tmp / "down");
  const nlohmann::json a =
      server_->check_json("artifact " + run.run_id + " checkpoints/best/weights.bin " + (tmp / "down"));
  ASSERT_TRUE(a.is_object());
  EXPECT_EQ(read_file(a["path"]), read_file(tmp / "weights.bin"));
  const nlohmann::json b = server_->check_json("artifact " + run.run_id + " config.yaml " + (tmp / "down"));
  EXPECT_EQ(read_file(b["path"]), read_file(tmp / "config.yaml"));
  // Not an mlflow-artifacts:/ URI, or no such file: errors naming them.
  try {
    c.upload_artifact("s3://bucket/1/x/artifacts", tmp / "config.yaml", "c.yaml");
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_TRUE(contains(e.what(), "s3://bucket/1/x/artifacts")) << e.what();
  }
  try {
    c.upload_artifact(run.artifact_uri, tmp / "missing.bin", "m.bin");
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_TRUE(contains(e.what(), "missing.bin")) << e.what();
    EXPECT_FALSE(e.retriable());
  }
}

TEST_F(Mlflow, ErrorsAreOneClearLine) {
  MlflowClient c = client();
  try {
    c.get_run("0123456789abcdef0123456789abcdef");
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(e.error_code(), "RESOURCE_DOES_NOT_EXIST");
    EXPECT_FALSE(e.retriable());
    EXPECT_TRUE(contains(e.what(), server_->uri())) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  const std::string nobody = "http://127.0.0.1:" + std::to_string(free_port());
  MlflowClient away(MlflowServer{nobody, "alice", "s3cret-password"});
  try {
    away.experiment_id("x");
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_EQ(e.status(), 0);
    EXPECT_TRUE(e.retriable());
    EXPECT_TRUE(contains(e.what(), "MLflow tracking server " + nobody + ": no answer (")) << e.what();
    EXPECT_FALSE(contains(e.what(), "s3cret")) << e.what();
  }
  // Not the tracking server's API root: the answer is not JSON (or a 404), said as such.
  MlflowClient wrong(MlflowServer{server_->uri() + "/nothing-here"});
  EXPECT_THROW(wrong.get_run("0123456789abcdef0123456789abcdef"), MlflowError);
}

TEST_F(Mlflow, RunLoggerDeliversEverythingInOrder) {
  const RunInfo run = new_run("logger", "many");
  TempDir tmp;
  Warnings warnings;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool.jsonl";
  o.warn = warnings.callback();
  const std::vector<Metric> a = loss_curve("a", 0, 2500), b = loss_curve("b", 0, 300);
  std::vector<KeyValue> params;
  for (int i = 0; i < 150; ++i) params.emplace_back("p" + std::to_string(i), std::to_string(i));
  write_file(tmp / "notes.txt", "notes\n");
  {
    RunLogger logger(client(), run, o);
    logger.log_params(params);
    logger.log_metrics(a);
    for (size_t i = 0; i < b.size(); i += 10) logger.log_metrics({b.begin() + i, b.begin() + i + 10});
    logger.set_tags({{"phase", "train"}});
    logger.set_tags({{"phase", "done"}});
    logger.log_artifact(tmp / "notes.txt", "text");
    logger.set_status(RunStatus::kFinished, kT0 + 1000);
    const auto t = Clock::now();
    logger.close(120);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 120);
    EXPECT_EQ(logger.spooled(), 0);
  }
  EXPECT_TRUE(warnings.all().empty()) << warnings.all()[0];
  EXPECT_FALSE(fs::exists(tmp / "spool.jsonl"));
  const nlohmann::json r = server_->check_json("run " + run.run_id + " a b");
  expect_history(r, "a", a);
  expect_history(r, "b", b);
  EXPECT_EQ(r["params"].size(), 150u);
  EXPECT_EQ(r["tags"]["phase"], "done");
  EXPECT_EQ(r["status"], "FINISHED");
  const nlohmann::json files = server_->check_json("artifacts " + run.run_id + " text");
  EXPECT_EQ(files, nlohmann::json::array({"text/notes.txt"}));
}

TEST_F(Mlflow, RefusedRequestIsDroppedNotSpooled) {
  TempDir tmp;
  Warnings warnings;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool.jsonl";
  o.warn = warnings.callback();
  RunInfo ghost;
  ghost.run_id = "0123456789abcdef0123456789abcdef";
  ghost.artifact_uri = "mlflow-artifacts:/0/" + ghost.run_id + "/artifacts";
  RunLogger logger(client(), ghost, o);
  logger.log_metrics(loss_curve("loss", 0, 3));
  logger.set_status(RunStatus::kFinished, kT0);
  logger.close(60);
  EXPECT_EQ(logger.spooled(), 0);
  EXPECT_FALSE(fs::exists(tmp / "spool.jsonl"));
  EXPECT_EQ(warnings.count("(request dropped)"), 2) << warnings.all().size();
  EXPECT_GE(warnings.count("RESOURCE_DOES_NOT_EXIST"), 1);
}

// The server stops: requests go to the spool (one warning), close() keeps to its timeout; the server comes
// back: replay_spool delivers them all, and a second replay of the same lines adds nothing.
TEST_F(Mlflow, SpoolWhileServerIsDownThenReplay) {
  const RunInfo run = new_run("spool", "outage");
  TempDir tmp;
  write_file(tmp / "best.txt", "epoch 3\n");
  Warnings warnings;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool/mlflow.jsonl";
  o.retry_seconds = 0.6;
  o.probe_seconds = 600;
  o.warn = warnings.callback();
  const std::vector<Metric> m1 = loss_curve("loss", 0, 40), m2 = loss_curve("loss", 40, 1500);
  server_->stop();
  RunLogger logger(client(), run, o);
  logger.log_params({{"lr", "0.1"}});
  logger.log_metrics(m1);
  logger.log_artifact(tmp / "best.txt", "checkpoints");
  logger.log_metrics(m2);
  logger.set_status(RunStatus::kFinished, kT0 + 5000);
  const auto t = Clock::now();
  logger.close(5);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(),
            10.0);  // its 5 s, and slack for a loaded machine
  EXPECT_EQ(warnings.all().size(), 1u);
  EXPECT_EQ(warnings.count("no answer"), 1) << warnings.all().size();
  const int lines = count_lines(o.spool_path);
  EXPECT_EQ(lines, logger.spooled());
  EXPECT_GE(lines, 4);  // params+metrics batches, the upload, the status
  fs::copy_file(o.spool_path, tmp / "copy.jsonl");

  server_->start();
  ASSERT_TRUE(server_->running());
  MlflowClient c = client();
  Warnings replay_warnings;
  const tracking::SpoolReplay r = tracking::replay_spool(c, o.spool_path, replay_warnings.callback());
  EXPECT_EQ(r.sent, lines);
  EXPECT_EQ(r.refused, 0);
  EXPECT_EQ(r.left, 0);
  EXPECT_FALSE(fs::exists(o.spool_path));
  const tracking::SpoolReplay again =
      tracking::replay_spool(c, tmp / "copy.jsonl", replay_warnings.callback());
  EXPECT_EQ(again.sent, lines);
  EXPECT_TRUE(replay_warnings.all().empty()) << replay_warnings.all()[0];

  std::vector<Metric> all = m1;
  all.insert(all.end(), m2.begin(), m2.end());
  const nlohmann::json back = server_->check_json("run " + run.run_id + " loss");
  expect_history(back, "loss", all);
  EXPECT_EQ(back["params"]["lr"], "0.1");
  EXPECT_EQ(back["status"], "FINISHED");
  const nlohmann::json a =
      server_->check_json("artifact " + run.run_id + " checkpoints/best.txt " + tmp.str());
  EXPECT_EQ(read_file(a["path"]), "epoch 3\n");
  // No file: nothing to do.
  EXPECT_EQ(tracking::replay_spool(c, tmp / "none.jsonl", nullptr).sent, 0);
}

// While spooling, the first request after probe_seconds tries again: the spool goes first, then the rest.
TEST_F(Mlflow, ProbeFindsTheServerBackAndSendsTheSpoolFirst) {
  const RunInfo run = new_run("probe", "comeback");
  TempDir tmp;
  Warnings warnings;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool.jsonl";
  o.retry_seconds = 0.3;
  o.probe_seconds = 1;
  o.warn = warnings.callback();
  server_->stop();
  RunLogger logger(client(), run, o);
  logger.log_metrics(loss_curve("loss", 0, 10));
  ASSERT_TRUE(wait_until([&] { return logger.spooled() >= 1; }, 30));
  logger.log_metrics(loss_curve("loss", 10, 10));  // within probe_seconds: straight to the spool
  ASSERT_TRUE(wait_until([&] { return logger.spooled() >= 2; }, 30));
  server_->start();
  ASSERT_TRUE(server_->running());
  logger.log_metrics(loss_curve("loss", 20, 10));
  logger.set_status(RunStatus::kFinished, kT0 + 1);
  logger.close(60);
  EXPECT_EQ(logger.spooled(), 2);
  EXPECT_EQ(warnings.all().size(), 1u);
  EXPECT_EQ(warnings.count("no answer"), 1) << warnings.all().size();
  EXPECT_FALSE(fs::exists(o.spool_path));
  const nlohmann::json back = server_->check_json("run " + run.run_id + " loss");
  expect_history(back, "loss", loss_curve("loss", 0, 30));
  EXPECT_EQ(back["status"], "FINISHED");
}

TEST(RunLoggerOffline, CloseInterruptsTheBackoffAndSpools) {
  TempDir tmp;
  Warnings warnings;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool.jsonl";
  o.retry_seconds = 120;  // would retry for two minutes
  o.warn = warnings.callback();
  RunInfo run;
  run.run_id = "abc";
  const std::string nobody = "http://127.0.0.1:" + std::to_string(free_port());
  auto logger = std::make_unique<RunLogger>(MlflowClient(MlflowServer{nobody}), run, o);
  logger->log_metrics(loss_curve("loss", 0, 5));
  logger->set_status(RunStatus::kFailed, kT0);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // in its backoff by now
  auto t = Clock::now();
  logger->close(1);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(),
            5.0);  // 1 s, and slack for a loaded machine (not its 120 s)
  EXPECT_EQ(logger->spooled(), 2);
  logger->log_metrics(loss_curve("loss", 5, 5));  // after close: ignored
  t = Clock::now();
  logger.reset();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 5.0);
  EXPECT_EQ(count_lines(o.spool_path), 2);
  EXPECT_EQ(warnings.count("not done after 1 s; 2 requests spooled"), 1) << warnings.all().size();
  // Its lines: self-contained requests.
  const std::string first = read_file(o.spool_path).substr(0, read_file(o.spool_path).find('\n'));
  const nlohmann::json j = nlohmann::json::parse(first);
  EXPECT_EQ(j["op"], "log-batch");
  EXPECT_EQ(j["body"]["run_id"], "abc");
  EXPECT_EQ(j["body"]["metrics"].size(), 5u);
  // Not a spool file: one error line.
  write_file(tmp / "bad.jsonl", "{\"op\":\"log-batch\",\"body\":{}}\nnot json\n");
  MlflowClient c(MlflowServer{nobody});
  EXPECT_THROW(tracking::replay_spool(c, tmp / "bad.jsonl", nullptr), std::runtime_error);
  // The server away: nothing sent, the file as it was.
  const std::string before = read_file(o.spool_path);
  const tracking::SpoolReplay r = tracking::replay_spool(c, o.spool_path, nullptr);
  EXPECT_EQ(r.sent, 0);
  EXPECT_EQ(r.left, 2);
  EXPECT_EQ(read_file(o.spool_path), before);
}

// A server that takes the connection and never answers: close() abandons the call in flight (cancelled).
TEST(RunLoggerOffline, CloseAbandonsTheCallInFlight) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n), 0);
  TempDir tmp;
  RunLoggerOptions o;
  o.spool_path = tmp / "spool.jsonl";
  o.retry_seconds = 120;
  RunInfo run;
  run.run_id = "abc";
  MlflowServer silent{"http://127.0.0.1:" + std::to_string(ntohs(a.sin_port))};
  silent.request_timeout_s = 60;
  auto logger = std::make_unique<RunLogger>(MlflowClient(silent), run, o);
  logger->log_params({{"lr", "0.1"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // sent, waiting for an answer
  auto t = Clock::now();
  logger->close(0.5);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(),
            5.0);  // 0.5 s and slack, not the call's 60 s
  EXPECT_EQ(logger->spooled(), 1);
  t = Clock::now();
  logger.reset();  // joins its thread: the call is cancelled, not waited for (60 s)
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 8.0);
  EXPECT_EQ(count_lines(o.spool_path), 1);
  ::close(fd);
}

// A local HTTP server that answers 200 "{}" and records each request (mlflow_check.py header-server).
class RecordingServer {
 public:
  RecordingServer() {
    pid_ = MlflowTestServer::spawn_group(
        {venv_python(), MlflowTestServer::script(), "header-server", dir_ / "port", dir_ / "requests.jsonl"},
        {}, dir_ / "log");
    if (!wait_for_file(dir_ / "port", 30)) ADD_FAILURE() << read_file(dir_ / "log");
  }
  ~RecordingServer() {
    ::kill(-pid_, SIGTERM);
    wait_exit(pid_, 10);
  }
  std::string uri() const { return "http://127.0.0.1:" + read_file(dir_ / "port"); }
  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> out;
    std::stringstream ss(read_file(dir_ / "requests.jsonl"));
    for (std::string line; std::getline(ss, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
};

TEST(MlflowRequests, CredentialsSentAsMlflowsClientsDo) {
  if (venv_python().empty()) RANZCR_SKIP_WITHOUT_REFERENCE("no .venv python");
  RecordingServer rec;
  MlflowClient(MlflowServer{rec.uri(), "alice", "s3cr:et"}).update_run("r1", RunStatus::kKilled, 0);
  // (The recorder's "{}" is no run: an error saying so.)
  EXPECT_THROW(MlflowClient(MlflowServer{rec.uri(), "alice", "s3cr:et", "tok-123"}).get_run("r 1&x"),
               MlflowError);
  try {
    MlflowClient(MlflowServer{rec.uri(), "alice", "s3cr:et"}).call("GET", "deny", "");
    ADD_FAILURE() << "no error";
  } catch (const MlflowError& e) {
    EXPECT_EQ(e.status(), 401);
    EXPECT_FALSE(e.retriable());
    EXPECT_TRUE(contains(e.what(), "MLflow tracking server " + rec.uri() +
                                       ": GET deny: HTTP 401 (check MLFLOW_TRACKING_USERNAME/PASSWORD or "
                                       "MLFLOW_TRACKING_TOKEN) UNAUTHENTICATED"))
        << e.what();
    EXPECT_FALSE(contains(e.what(), "s3cr")) << e.what();
  }
  const auto req = rec.requests();
  ASSERT_EQ(req.size(), 3u);
  EXPECT_EQ(req[0]["method"], "POST");
  EXPECT_EQ(req[0]["path"], "/api/2.0/mlflow/runs/update");
  EXPECT_EQ(req[0]["headers"]["authorization"], "Basic YWxpY2U6czNjcjpldA==");  // alice:s3cr:et
  EXPECT_EQ(req[0]["headers"]["content-type"], "application/json");
  EXPECT_EQ(nlohmann::json::parse(req[0]["body"].get<std::string>()),
            nlohmann::json({{"run_id", "r1"}, {"status", "KILLED"}}));
  EXPECT_EQ(req[1]["method"], "GET");
  EXPECT_EQ(req[1]["path"], "/api/2.0/mlflow/runs/get?run_id=r%201%26x");
  EXPECT_EQ(req[1]["headers"]["authorization"], "Bearer tok-123");
}

TEST(MlflowRequests, RunLoggerBatchesWithinMlflowsLimits) {
  if (venv_python().empty()) RANZCR_SKIP_WITHOUT_REFERENCE("no .venv python");
  RecordingServer rec;
  RunInfo run;
  run.run_id = "r1";
  RunLoggerOptions o;
  {
    RunLogger logger(MlflowClient(MlflowServer{rec.uri()}), run, o);
    logger.log_metrics(loss_curve("a", 0, 2500));
    std::vector<KeyValue> params;
    for (int i = 0; i < 150; ++i) params.emplace_back("p" + std::to_string(i), std::string(5000, 'x'));
    logger.log_params(params);
    std::vector<KeyValue> tags;
    for (int i = 0; i < 120; ++i) tags.emplace_back("t" + std::to_string(i), "v");
    logger.set_tags(tags);
    logger.close(60);
  }
  size_t metrics = 0, params = 0, tags = 0;
  const auto req = rec.requests();
  for (const auto& r : req) {
    ASSERT_EQ(r["path"], "/api/2.0/mlflow/runs/log-batch");
    const std::string body = r["body"];
    EXPECT_LT(body.size(), 1'000'000u);
    const auto b = nlohmann::json::parse(body);
    EXPECT_LE(b["metrics"].size(), tracking::kMaxMetricsPerBatch);
    EXPECT_LE(b["params"].size(), tracking::kMaxParamsPerBatch);
    EXPECT_LE(b["tags"].size(), tracking::kMaxTagsPerBatch);
    EXPECT_LE(b["metrics"].size() + b["params"].size() + b["tags"].size(), tracking::kMaxEntitiesPerBatch);
    metrics += b["metrics"].size();
    params += b["params"].size();
    tags += b["tags"].size();
  }
  EXPECT_EQ(metrics, 2500u);
  EXPECT_EQ(params, 150u);
  EXPECT_EQ(tags, 120u);
  EXPECT_LE(req.size(), 7u);  // merged, not one call per entity
}

}  // namespace
}  // namespace ranzcr::test
