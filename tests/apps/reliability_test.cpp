// What clusters do to jobs, done to the real binary: a diverging loss, restarts of the same command,
// SIGTERM to every process at once (as Slurm does), torchrun restarting its workers, a mistyped data
// root. Each test starts real processes and reads back what they left.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/io/checkpoint.h"
#include "tests/build_paths.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using Clock = std::chrono::steady_clock;

class ReliabilityTest : public test::CliSuite<ReliabilityTest> {
 public:
  static test::CliSetup setup() {
    return test::CliSetup{400,
                          64,
                          0,
                          {{"data.image_size", "32"},
                           {"data.num_workers", "1"},
                           {"train.epochs", "1"},
                           {"train.batch_size", "8"},
                           {"train.num_threads", "1"},
                           {"train.log_every_seconds", "0.1"},
                           {"distributed.timeout_seconds", "60"},
                           {"distributed.grace_seconds", "60"}}};
  }

 protected:
  static std::string train_cmd(const std::string& run, const std::string& sets = "") {
    return bin() + " train --config " + cfg() + " --set output.dir=" + run + " " + sets;
  }
  static std::vector<std::string> train_args(const std::string& run, std::vector<std::string> sets) {
    std::vector<std::string> a = {"train", "--config", cfg(), "--set", "output.dir=" + run};
    for (auto& s : sets) a.insert(a.end(), {"--set", s});
    return a;
  }
  static std::vector<int64_t> epochs(const std::string& run) {
    std::vector<int64_t> e;
    for (const auto& m : test::read_metrics(run)) e.push_back(m["epoch"].get<int64_t>());
    return e;
  }
};

size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  size_t n = 0;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path());
  return out;
}

// The command: a learning rate of 1e8 without clipping. It once printed `loss -nan` and hung in
// the AUC. Now: one error line naming the epoch, step and learning rate, exit 1, the last good
// checkpoint untouched, no epoch recorded for the diverged one, no temporary files.
TEST_F(ReliabilityTest, DivergenceStopsAtOnceAndKeepsTheLastGoodCheckpoint) {
  const std::string run = *dir_ / "diverge";
  ASSERT_EQ(run_command(train_cmd(run)).status, 0);
  const std::string good = test::read_file(run + "/checkpoints/last.pt");
  const auto start = Clock::now();
  const auto r =
      run_command(train_cmd(run, "--set train.epochs=2 --set optim.lr=1e8 --set optim.grad_clip=0"));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_LT(seconds, 120);
  EXPECT_EQ(count_lines_starting(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("error: training diverged"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in epoch 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr "), std::string::npos) << r.output;
  EXPECT_EQ(test::read_file(run + "/checkpoints/last.pt"), good);
  EXPECT_EQ(epochs(run), (std::vector<int64_t>{1}));
  EXPECT_TRUE(temp_files(run).empty());
}

// A mistyped data.root must not become a freshly generated synthetic data set.
TEST_F(ReliabilityTest, SyntheticDataIsGeneratedOnlyWhereTheConfigSaysItLives) {
  const std::string home = *dir_ / "synth_home", typo = *dir_ / "synth_hme";
  const std::string synth = " --set synth.generate_if_missing=true --set synth.root=" + home +
                            " --set synth.num_images=40 --set synth.num_test_images=0";
  const auto bad = run_command(train_cmd(*dir_ / "typo_run", synth + " --set data.root=" + typo));
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(count_lines_starting(bad.output, "error: data set not found: " + typo), 1u) << bad.output;
  EXPECT_NE(bad.output.find("synth.root"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(typo));
  const auto ok = run_command(train_cmd(*dir_ / "synth_run", synth + " --set data.root=" + home));
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_TRUE(fs::exists(home + "/train.csv"));
}

// SIGTERM to the launcher and both workers at the same moment, twice (Slurm signals every process of
// a step; a time limit sends two SIGTERMs): the workers save mid-epoch, the job exits 143, and running
// the same command again continues from that batch. With synchronised BatchNorm (bn_sync: sync), whose
// collectives in every layer's forward and backward a stopping rank must not leave unpaired.
TEST_F(ReliabilityTest, SigtermToEveryProcessAtOnceTwiceSavesMidEpoch) {
  const std::string run = *dir_ / "sigterm_all";
  // resnet18 on one thread: an epoch of ~20 batches per rank takes seconds, so the stop lands mid-epoch.
  const auto args = train_args(run, {"distributed.nproc_per_node=2", "model.name=resnet18",
                                     "data.image_size=64", "distributed.bn_sync=sync"});
  const pid_t launcher = test::spawn(args, {}, run + ".log");
  ASSERT_TRUE(test::wait_for_text(run + ".log", "epoch 1/1 step", 120)) << test::read_file(run + ".log");
  std::vector<pid_t> all = test::processes_mentioning(run);
  ASSERT_EQ(all.size(), 3u);
  for (pid_t p : all) ::kill(p, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (pid_t p : all) ::kill(p, SIGTERM);
  EXPECT_EQ(test::wait_exit(launcher, 120), 128 + SIGTERM);
  const std::string log = test::read_file(run + ".log");
  EXPECT_NE(log.find("20 BatchNorm layers normalise over all 2 ranks' batches (bn_sync: sync)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("stopped at epoch 1 batch"), std::string::npos) << log;
  EXPECT_NE(log.find("the workers saved and stopped"), std::string::npos) << log;
  EXPECT_TRUE(test::processes_mentioning(run).empty());
  const CheckpointMeta meta = read_checkpoint_meta(run + "/checkpoints/last.pt");
  EXPECT_EQ(meta.epoch, 0);
  ASSERT_GT(meta.epoch_batches_done, 0);
  ASSERT_EQ(meta.rng_states.size(0), 2);
  EXPECT_FALSE(torch::equal(meta.rng_states[0], meta.rng_states[1]));  // each rank its own dropout stream

  const pid_t again = test::spawn(args, {}, run + ".again.log");
  ASSERT_EQ(test::wait_exit(again, 300), 0) << test::read_file(run + ".again.log");
  const std::string resumed = test::read_file(run + ".again.log");
  EXPECT_NE(resumed.find("resumed from " + run + "/checkpoints/last.pt at epoch 0, step " +
                         std::to_string(meta.step) + ", batch " + std::to_string(meta.epoch_batches_done)),
            std::string::npos)
      << resumed;
  EXPECT_EQ(epochs(run), (std::vector<int64_t>{1}));
}

// The real torchrun (from the torch wheel), --max-restarts 1, one worker SIGKILLed mid-run: torchrun
// restarts both, they continue from last.pt (train.resume: auto), every epoch is in metrics.jsonl once.
TEST_F(ReliabilityTest, TorchrunRestartContinuesTheRun) {
  const std::string torchrun = std::string(test::source_dir()) + "/.venv/bin/torchrun";
  if (!fs::exists(torchrun))
    RANZCR_SKIP_WITHOUT_REFERENCE("no torchrun at " << torchrun << " (scripts/setup.sh installs it)");
  const std::string run = *dir_ / "torchrun";
  std::vector<std::string> args = {"--standalone", "--nproc-per-node=2", "--max-restarts=1", "--no-python",
                                   bin()};
  for (const auto& a : train_args(run, {"model.name=resnet18", "data.image_size=64", "train.epochs=3"}))
    args.push_back(a);
  const pid_t agent = test::spawn(args, {{"OMP_NUM_THREADS", "1"}}, run + ".log", torchrun);
  ASSERT_TRUE(test::wait_for_text(run + ".log", "epoch 2/3 step", 240)) << test::read_file(run + ".log");
  pid_t victim = -1;
  for (pid_t p : test::processes_mentioning(run))
    if (test::process_env(p, "LOCAL_RANK") == "1" &&
        test::process_env(p, "TORCHELASTIC_RESTART_COUNT") == "0")
      victim = p;
  ASSERT_GT(victim, 0) << test::read_file(run + ".log");
  ::kill(victim, SIGKILL);
  ASSERT_EQ(test::wait_exit(agent, 600), 0) << test::read_file(run + ".log");
  const std::string log = test::read_file(run + ".log");
  EXPECT_NE(log.find("resumed from " + run + "/checkpoints/last.pt at epoch 1"), std::string::npos) << log;
  EXPECT_EQ(epochs(run), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(read_checkpoint_meta(run + "/checkpoints/last.pt").epoch, 3);
}

}  // namespace
}  // namespace ranzcr
