// output.mlflow against a real MLflow tracking server (mlflow from PyPI in .venv, started on a free port with
// a SQLite store: tests/mlflow_server.h), read back with MLflow's own Python client
// (tests/apps/mlflow_run_check.py): a run's parameters, metrics at every epoch (equal to metrics.jsonl),
// tags, artifacts and status; SIGTERM (KILLED) and the resume into the same run; cv's parent and children;
// the server stopped mid-run and `ranzcr mlflow-sync`; evaluate --mlflow-run; a server that is not there at
// start; and the MLflow UI's charts of a run in headless Chromium (tests/apps/mlflow_ui_check.py).
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/checkpoint.h"
#include "engine/report/tracked_run.h"
#include "tests/build_paths.h"
#include "tests/mlflow_server.h"
#include "tests/process_util.h"
#include "tests/test_util.h"
#include "tracking/mlflow/mlflow_tracker.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;
using test::contains;
using test::read_file;

class MlflowCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 80, 64, 6);
    if (test::mlflow_available()) server_ = new test::MlflowTestServer();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!server_)
      RANZCR_SKIP_WITHOUT_REFERENCE("no mlflow in .venv (scripts/setup.sh installs mlflow==3.17.2)");
  }
  /// A config in `name`.yaml: tiny_cnn on the suite's data set, the run folder `name`, logging to `uri`.
  static std::string config(const std::string& name, const std::string& uri,
                            std::vector<std::pair<std::string, std::string>> keys = {}) {
    std::vector<std::pair<std::string, std::string>> all = {
        {"output.dir", *dir_ / name}, {"output.mlflow", uri},     {"train.epochs", "3"},
        {"train.batch_size", "16"},   {"train.num_threads", "1"}, {"train.log_every_seconds", "0.2"},
        {"data.num_workers", "1"}};
    all.insert(all.end(), keys.begin(), keys.end());
    const std::string path = *dir_ / (name + ".yaml");
    test::write_config(path, *dir_ / "ds", all);
    return path;
  }
  static test::CommandResult ranzcr(const std::string& args) {
    return test::run_command(std::string(test::ranzcr_binary()) + " " + args + " 2>&1");
  }
  /// mlflow_run_check.py with MLflow's client on the suite's server (in the server's worker for the script:
  /// MLflow's client imported once, not once per check).
  static test::CommandResult check(const std::string& args) {
    return server_->run_script(std::string(test::source_dir()) + "/tests/apps/mlflow_run_check.py", args);
  }
  /// A script of the source tree (with its arguments) run by the .venv python, MLFLOW_TRACKING_URI
  /// `server`'s.
  static test::CommandResult python(const test::MlflowTestServer& server, const std::string& script_args) {
    return test::run_command("MLFLOW_TRACKING_URI=" + server.uri() + " " + test::venv_python() +
                             " -W ignore " + test::source_dir() + "/" + script_args + " 2>&1");
  }
  static std::string run_id(const std::string& run_dir) {
    return nlohmann::json::parse(read_file(run_dir + "/mlflow_run.json"))["run_id"].get<std::string>();
  }

  static inline test::TempDir* dir_ = nullptr;
  static inline test::MlflowTestServer* server_ = nullptr;
};

// Everything of a run, read back by MLflow's client; the checkpoint and the folder keep the run id; the
// credentials of the environment reach no file; evaluate adds its figures and files to the model's own run,
// or with --mlflow-run to another one.
TEST_F(MlflowCliTest, TrainLogsParamsMetricsTagsArtifactsAndStatus) {
  const std::string run = *dir_ / "plain";
  const std::string secret = "pw-never-written-0451";
  const auto r = test::run_command("MLFLOW_TRACKING_USERNAME=alice MLFLOW_TRACKING_PASSWORD=" + secret + " " +
                                   test::ranzcr_binary() + " train --config " +
                                   config("plain", server_->uri()) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "mlflow: logging to run")) << r.output;
  const auto c =
      check("run --run-dir " + run +
            " --status FINISHED --artifacts config.yaml,metrics.jsonl,log.txt,curves/curves_loss.png"
            " --tags mlflow.source.name,mlflow.source.git.commit,ranzcr.version,ranzcr.device,"
            "ranzcr.world_size,ranzcr.model,mlflow.runName");
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "\"epochs\": 3")) << c.output;
  const std::string id = run_id(run);
  EXPECT_EQ(read_checkpoint_meta(run + "/checkpoints/last.pt").tracker_run_ids.at("mlflow"), id);
  EXPECT_EQ(read_checkpoint_meta(run + "/checkpoints/best.pt").tracker_run_ids.at("mlflow"), id);
  EXPECT_FALSE(fs::exists(run + "/mlflow_spool.jsonl"));
  EXPECT_FALSE(contains(r.output, secret));
  for (const auto& entry : fs::recursive_directory_iterator(run))
    if (entry.is_regular_file())
      EXPECT_FALSE(contains(read_file(entry.path().string()), secret)) << entry.path();

  // The model's config logs to MLflow: evaluate adds to its run.
  const auto e = ranzcr("evaluate --checkpoint " + run + "/checkpoints/best.pt --out " +
                        *dir_ / "plain_eval/eval.json --bootstrap 0");
  ASSERT_EQ(e.status, 0) << e.output;
  const auto ec = check("eval --run-id " + id + " --json " + *dir_ / "plain_eval/eval.json");
  EXPECT_EQ(ec.status, 0) << ec.output;

  // --mlflow-run: another run (here one made with the client), not the model's.
  tracking::MlflowClient client(tracking::MlflowServer{server_->uri()});
  const std::string other = client.create_run(client.experiment_id("plain"), "evaluations", 0, {}).run_id;
  const auto o = ranzcr("evaluate --checkpoint " + run + "/checkpoints/best.pt --out " +
                        *dir_ / "other_eval/eval.json --bootstrap 0 --mlflow-run " + other);
  ASSERT_EQ(o.status, 0) << o.output;
  const auto oc = check("eval --run-id " + other + " --json " + *dir_ / "other_eval/eval.json");
  EXPECT_EQ(oc.status, 0) << oc.output;
  const auto missing =
      ranzcr("evaluate --checkpoint " + run +
             "/checkpoints/best.pt --bootstrap 0 --mlflow-run 0123456789abcdef0123456789abcdef");
  EXPECT_NE(missing.status, 0);
  EXPECT_EQ(test::error_lines(missing.output).size(), 1u) << missing.output;
}

// A run that ends in an error (a diverged loss) is FAILED; its epochs so far are there.
TEST_F(MlflowCliTest, ARunThatFailsIsFailed) {
  const std::string run = *dir_ / "diverged";
  const auto r = ranzcr("train --config " +
                        config("diverged", server_->uri(), {{"optim.lr", "1e8"}, {"optim.grad_clip", "0"}}));
  ASSERT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "error: training diverged")) << r.output;
  const auto c = check("run --run-dir " + run + " --status FAILED");
  EXPECT_EQ(c.status, 0) << c.output;
}

// A config value longer than MLflow takes (6000 characters) is the artifact params/<key>.txt, not a
// parameter.
TEST_F(MlflowCliTest, LongValuesBecomeArtifacts) {
  Config config;
  config.output.mlflow = server_->uri();
  config.output.mlflow_experiment = "long";
  config.data.train_csv = std::string(7000, 'x') + ".csv";
  tracking::MlflowSettings settings;
  settings.server.uri = server_->uri();
  settings.experiment = config.output.mlflow_experiment;
  tracking::RunStart start;
  start.run_dir = *dir_ / "long";
  start.command = "train";
  start.params = config_params(config);
  fs::create_directories(start.run_dir);
  std::string id;
  {
    tracking::MlflowTracker run(settings, {});
    ASSERT_TRUE(run.open(start));
    id = run.run_id();
    run.finish(tracking::RunStatus::kFinished);
  }
  const auto c = check("param-artifact --run-id " + id + " --key data.train_csv");
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "\"length\": 7004")) << c.output;
  EXPECT_TRUE(contains(c.output, "\"param\": null")) << c.output;
  EXPECT_TRUE(contains(c.output, "\"data.image_size\": \"256\"")) << c.output;
}

// SIGTERM mid-run: status KILLED; the same command again continues the same MLflow run (no second run), and
// its history has every epoch exactly once, equal to metrics.jsonl.
TEST_F(MlflowCliTest, SigtermIsKilledAndTheResumeContinuesTheSameRun) {
  const std::string run = *dir_ / "killed";
  const std::string cfg = config("killed", server_->uri(),
                                 {{"model.name", "resnet18"},
                                  {"train.epochs", "3"},
                                  {"data.image_size", "48"},
                                  {"output.mlflow_experiment", "killed"}});
  const pid_t pid = test::spawn({"train", "--config", cfg}, {}, run + ".log");
  ASSERT_TRUE(test::wait_for_text(run + ".log", "epoch 2/3 step", 300)) << read_file(run + ".log");
  ::kill(pid, SIGTERM);
  ASSERT_EQ(test::wait_exit(pid, 120), 128 + SIGTERM) << read_file(run + ".log");
  const std::string log = read_file(run + ".log");
  EXPECT_TRUE(contains(log, "stopped at epoch 2 batch") || contains(log, "stopped after epoch 2")) << log;
  const std::string id = run_id(run);
  const auto killed = check("run --run-dir " + run + " --status KILLED");
  EXPECT_EQ(killed.status, 0) << killed.output << read_file(run + ".log");

  const auto again = ranzcr("train --config " + cfg);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "mlflow: continuing run " + id)) << again.output;
  EXPECT_EQ(run_id(run), id);
  const auto done = check("run --run-dir " + run + " --status FINISHED");
  EXPECT_EQ(done.status, 0) << done.output;
  EXPECT_TRUE(contains(done.output, "\"epochs\": 3")) << done.output;
  const auto runs = check("runs --experiment killed");
  EXPECT_TRUE(contains(runs.output, "{\"runs\": 1}")) << runs.output;
}

// cv: one parent run with the out-of-fold AUC, one child run per fold.
TEST_F(MlflowCliTest, CvLogsAParentWithOneChildPerFold) {
  const auto r =
      ranzcr("cv --config " + config("cv", server_->uri(), {{"data.folds", "3"}, {"train.epochs", "1"}}));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto c = check("cv --run-dir " + *dir_ / "cv" + " --folds 3");
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "\"children\": 3")) << c.output;
}

// The server stops after the first epoch: training goes on to the end (exit 0) with one warning, the
// requests wait in the spool, and `ranzcr mlflow-sync` sends them once the server is back: the record is
// then complete (every epoch equal to metrics.jsonl, FINISHED).
TEST_F(MlflowCliTest, ServerStoppedMidRunIsCompletedByMlflowSync) {
  test::MlflowTestServer& server = *server_;  // stopped and started again on its port and store
  const std::string run = *dir_ / "offline";
  const std::string cfg =
      config("offline", server.uri(),
             {{"model.name", "resnet18"}, {"train.epochs", "3"}, {"data.image_size", "48"}});
  const pid_t pid = test::spawn({"train", "--config", cfg}, {}, run + ".log");
  ASSERT_TRUE(test::wait_for_text(run + ".log", "epoch 2/3 step", 300)) << read_file(run + ".log");
  server.stop();
  ASSERT_EQ(test::wait_exit(pid, 300), 0) << read_file(run + ".log");
  const std::string log = read_file(run + ".log");
  EXPECT_TRUE(contains(log, "ranzcr mlflow-sync " + run)) << log;
  ASSERT_TRUE(fs::exists(run + "/mlflow_spool.jsonl"));
  EXPECT_EQ(test::trained_epochs(run), (std::vector<int64_t>{1, 2, 3}));

  const auto early = ranzcr("mlflow-sync " + run);  // still down: an error, the spool kept
  EXPECT_NE(early.status, 0) << early.output;
  EXPECT_EQ(test::error_lines(early.output).size(), 1u) << early.output;
  EXPECT_TRUE(fs::exists(run + "/mlflow_spool.jsonl"));

  server.start();
  const auto sync = ranzcr("mlflow-sync " + run);
  ASSERT_EQ(sync.status, 0) << sync.output;
  EXPECT_FALSE(fs::exists(run + "/mlflow_spool.jsonl"));
  const auto c = check("run --run-dir " + run + " --status FINISHED --artifacts config.yaml,metrics.jsonl");
  EXPECT_EQ(c.status, 0) << c.output;
}

// No server at start: one error line and no training (output.mlflow_required: true, the default); with
// output.mlflow_required: false a warning and a run without tracking. Bad URIs are config errors.
TEST_F(MlflowCliTest, AServerThatIsNotThereIsOneLineAtStart) {
  const std::string nobody = "http://127.0.0.1:" + std::to_string(test::free_port());
  const auto r = ranzcr("train --config " + config("absent", nobody));
  EXPECT_NE(r.status, 0) << r.output;
  const auto errors = test::error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_TRUE(contains(errors[0], "output.mlflow") && contains(errors[0], nobody)) << errors[0];
  EXPECT_FALSE(fs::exists(*dir_ / "absent/metrics.jsonl"));

  const auto relaxed =
      ranzcr("train --config " +
             config("relaxed", nobody, {{"output.mlflow_required", "false"}, {"train.epochs", "1"}}));
  EXPECT_EQ(relaxed.status, 0) << relaxed.output;
  EXPECT_TRUE(contains(relaxed.output, "training without MLflow tracking")) << relaxed.output;

  for (const std::string& bad : {"ftp://host:5000", "http://user:secret@host:5000"}) {
    const auto b = ranzcr("train --config " + config("bad", bad));
    EXPECT_NE(b.status, 0);
    ASSERT_EQ(test::error_lines(b.output).size(), 1u) << b.output;
    EXPECT_TRUE(contains(b.output, "output.mlflow")) << b.output;
    EXPECT_FALSE(contains(b.output, "secret")) << b.output;
  }
  const auto env = test::run_command("env -u MLFLOW_TRACKING_URI " + std::string(test::ranzcr_binary()) +
                                     " train --config " + config("env", "env") + " 2>&1");
  EXPECT_NE(env.status, 0);
  EXPECT_TRUE(contains(env.output, "MLFLOW_TRACKING_URI is not set")) << env.output;
}

// The MLflow UI (served by the same server over the same store) draws the run's metric charts: a screenshot
// in headless Chromium (kept in RANZCR_SCREENSHOT_DIR when set).
TEST_F(MlflowCliTest, TheMlflowUiShowsTheRunsCharts) {
  const std::string run = *dir_ / "ui";
  const auto r = ranzcr("train --config " + config("ui", server_->uri()));
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json record = nlohmann::json::parse(read_file(run + "/mlflow_run.json"));
  const char* keep = std::getenv("RANZCR_SCREENSHOT_DIR");
  const std::string shot = keep ? std::string(keep) + "/mlflow_ui.png" : *dir_ / "mlflow_ui.png";
  const auto c = python(*server_, "tests/apps/mlflow_ui_check.py --url " + server_->uri() +
                                      " --experiment-id " + record["experiment_id"].get<std::string>() +
                                      " --run-id " + record["run_id"].get<std::string>() +
                                      " --metrics val_auc_mean,train_loss,val_loss --screenshot " + shot +
                                      " --json " + *dir_ / "ui.json");
  if (c.status == 77) RANZCR_SKIP_WITHOUT_REFERENCE("no browser for the MLflow UI test: " << c.output);
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(fs::file_size(shot) > 10000) << shot;
}

}  // namespace
}  // namespace ranzcr
