// The ranzcr binary as a distributed job on localhost (Gloo, CPU): real launchers and workers.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "engine/io/checkpoint.h"
#include "models/registry.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using test::processes_mentioning;
using test::spawn;
using test::wait_exit;
using test::wait_for_file;
using Clock = std::chrono::steady_clock;

class DistributedCliTest : public test::CliSuite<DistributedCliTest> {
 public:
  static test::CliSetup setup() {
    return test::CliSetup{96,
                          64,
                          0,
                          {{"data.image_size", "32"},
                           {"train.epochs", "2"},
                           {"train.batch_size", "8"},
                           {"train.log_every_seconds", "0.2"},
                           {"distributed.timeout_seconds", "60"},
                           {"distributed.grace_seconds", "5"}}};
  }

 protected:
  // `train` arguments for a run folder `name` with more --set overrides.
  static std::vector<std::string> train_args(const std::string& name, std::vector<std::string> sets) {
    std::vector<std::string> a = {"train", "--config", cfg(), "--set", "output.dir=" + *dir_ / name};
    for (auto& s : sets) a.insert(a.end(), {"--set", s});
    return a;
  }
  static std::string run_dir(const std::string& name) { return *dir_ / name; }

  // Trains `name` for 4 epochs on 2 ranks, then `name`_resumed from its epoch 2: the same weights and AUC,
  // and the resumed run trained epochs 3 and 4 only (equal weights are not a rerun of the same seed).
  static void expect_resume_equals_uninterrupted(const std::string& name,
                                                 const std::vector<std::string>& sets) {
    std::vector<std::string> full_sets = {"distributed.nproc_per_node=2", "train.epochs=4",
                                          "output.keep_every=2"};
    full_sets.insert(full_sets.end(), sets.begin(), sets.end());
    const std::string full_dir = run_dir(name), resumed_dir = run_dir(name + "_resumed");
    const auto full = spawn(train_args(name, full_sets), {}, full_dir + ".log");
    ASSERT_EQ(wait_exit(full, 120), 0) << test::read_file(full_dir + ".log");
    std::vector<std::string> resumed_sets = {"distributed.nproc_per_node=2", "train.epochs=4"};
    resumed_sets.insert(resumed_sets.end(), sets.begin(), sets.end());
    auto args = train_args(name + "_resumed", resumed_sets);
    args.insert(args.end(), {"--resume", full_dir + "/checkpoints/epoch_002.pt"});
    const auto resumed = spawn(args, {}, resumed_dir + ".log");
    ASSERT_EQ(wait_exit(resumed, 120), 0) << test::read_file(resumed_dir + ".log");
    auto a = create_model("tiny_cnn", ModelSpec{}), b = create_model("tiny_cnn", ModelSpec{});
    load_checkpoint(full_dir + "/checkpoints/last.pt", *a, nullptr);
    load_checkpoint(resumed_dir + "/checkpoints/last.pt", *b, nullptr);
    const auto pb = b->named_parameters();
    for (const auto& kv : a->named_parameters())
      EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << name << ": " << kv.key();
    const auto bb = b->named_buffers();
    for (const auto& kv : a->named_buffers())
      EXPECT_TRUE(torch::equal(kv.value(), bb[kv.key()])) << name << ": " << kv.key();
    EXPECT_EQ(test::read_metrics(full_dir).back()["val_auc_mean"],
              test::read_metrics(resumed_dir).back()["val_auc_mean"]);
    EXPECT_EQ(test::trained_epochs(resumed_dir), (std::vector<int64_t>{3, 4}));
  }
};

TEST_F(DistributedCliTest, SigtermToLauncherStopsWorkersAndLeavesAResumableCheckpoint) {
  const std::string run = run_dir("sigterm");
  const pid_t launcher =
      spawn(train_args("sigterm", {"distributed.nproc_per_node=2", "train.epochs=500"}), {}, run + ".log");
  ASSERT_TRUE(wait_for_file(run + "/checkpoints/last.pt", 60)) << test::read_file(run + ".log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the next epoch
  ::kill(launcher, SIGTERM);
  const int status = wait_exit(launcher, 30);
  const std::string log = test::read_file(run + ".log");
  EXPECT_EQ(status, 128 + SIGTERM) << log;
  EXPECT_TRUE(processes_mentioning(run).empty()) << "processes left behind";
  const CheckpointMeta meta = read_checkpoint_meta(run + "/checkpoints/last.pt");
  EXPECT_EQ(meta.world_size, 2);
  EXPECT_NE(log.find("saved " + run + "/checkpoints/last.pt"), std::string::npos) << log;
  // Resumable: one more epoch from it.
  const int64_t epochs = meta.epoch + 1;
  auto args =
      train_args("sigterm", {"distributed.nproc_per_node=2", "train.epochs=" + std::to_string(epochs)});
  args.insert(args.end(), {"--resume", run + "/checkpoints/last.pt"});
  const pid_t resumed = spawn(args, {}, run + ".resume.log");
  ASSERT_EQ(wait_exit(resumed, 90), 0) << test::read_file(run + ".resume.log");
  EXPECT_EQ(test::read_metrics(run).back()["epoch"].get<int64_t>(), epochs);
}

TEST_F(DistributedCliTest, SigkillOfOneWorkerEndsTheJob) {
  const std::string run = run_dir("sigkill");
  const pid_t launcher =
      spawn(train_args("sigkill", {"distributed.nproc_per_node=2", "train.epochs=500"}), {}, run + ".log");
  ASSERT_TRUE(wait_for_file(run + "/checkpoints/last.pt", 60)) << test::read_file(run + ".log");
  std::vector<pid_t> workers;
  for (pid_t p : processes_mentioning(run))
    if (p != launcher) workers.push_back(p);
  ASSERT_EQ(workers.size(), 2u);
  const auto start = Clock::now();
  ::kill(workers[1], SIGKILL);
  const int status = wait_exit(launcher, 30);
  EXPECT_GT(status, 0) << test::read_file(run + ".log");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30.0);
  EXPECT_TRUE(processes_mentioning(run).empty()) << "processes left behind";
  EXPECT_NE(test::read_file(run + ".log").find("was killed by signal"), std::string::npos);
}

TEST_F(DistributedCliTest, TwoNodesOnLocalhostTrainOneJob) {
  const std::string port = std::to_string(pick_free_port());
  std::vector<pid_t> nodes;
  for (int n = 0; n < 2; ++n)
    nodes.push_back(spawn(train_args("nodes", {"train.epochs=1"}),
                          {{"NNODES", "2"},
                           {"NODE_RANK", std::to_string(n)},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", port}},
                          run_dir("nodes") + ".node" + std::to_string(n) + ".log"));
  for (int n = 0; n < 2; ++n)
    EXPECT_EQ(wait_exit(nodes[n], 90), 0)
        << test::read_file(run_dir("nodes") + ".node" + std::to_string(n) + ".log");
  const std::string log0 = test::read_file(run_dir("nodes") + ".node0.log");
  EXPECT_NE(log0.find("world size 2, 1 ranks per node"), std::string::npos) << log0;
  EXPECT_EQ(test::read_metrics(run_dir("nodes")).size(), 1u);
}

// Workers started by someone else: torchrun (with the store hosted by its agent, here this test) and srun.
TEST_F(DistributedCliTest, RunsAsAWorkerUnderTorchrunAndSlurm) {
  const int port = pick_free_port();
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = true;
  so.waitWorkers = false;
  auto agent_store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  std::vector<pid_t> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(spawn(train_args("torchrun", {"train.epochs=1"}),
                          {{"RANK", std::to_string(r)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {"WORLD_SIZE", "2"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"GROUP_RANK", "0"},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", std::to_string(port)},
                           {"TORCHELASTIC_RUN_ID", "test"},
                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                           {"TORCHELASTIC_RESTART_COUNT", "0"}},
                          run_dir("torchrun") + std::to_string(r) + ".log"));
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(wait_exit(ranks[r], 90), 0)
        << test::read_file(run_dir("torchrun") + std::to_string(r) + ".log");
  const std::string t0 = test::read_file(run_dir("torchrun") + "0.log");
  EXPECT_NE(t0.find("world size 2"), std::string::npos) << t0;
  EXPECT_NE(t0.find("launcher torchrun"), std::string::npos) << t0;
  EXPECT_EQ(t0.find("launching"), std::string::npos) << "a worker must not spawn";
  // The workers used the agent's store, under torchrun's prefix.
  EXPECT_TRUE(agent_store->check({"/worker/attempt_0/ranzcr/joined"}));

  const std::string slurm_port = std::to_string(pick_free_port());
  ranks.clear();
  for (int r = 0; r < 2; ++r)
    ranks.push_back(spawn(train_args("slurm", {"train.epochs=1"}),
                          {{"SLURM_PROCID", std::to_string(r)},
                           {"SLURM_NTASKS", "2"},
                           {"SLURM_LOCALID", std::to_string(r)},
                           {"SLURM_NODEID", "0"},
                           {"SLURM_STEP_TASKS_PER_NODE", "2"},
                           {"SLURM_JOB_NODELIST", "localhost"},
                           {"SLURM_JOB_ID", "42"},
                           {"SLURM_STEP_ID", "0"},
                           {"MASTER_PORT", slurm_port}},
                          run_dir("slurm") + std::to_string(r) + ".log"));
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(wait_exit(ranks[r], 90), 0) << test::read_file(run_dir("slurm") + std::to_string(r) + ".log");
  const std::string s0 = test::read_file(run_dir("slurm") + "0.log");
  EXPECT_NE(s0.find("world size 2, 2 ranks per node"), std::string::npos) << s0;
  EXPECT_NE(s0.find("launcher slurm"), std::string::npos) << s0;
  EXPECT_EQ(test::read_metrics(run_dir("slurm")).size(), 1u);
}

TEST_F(DistributedCliTest, InitMethodsFileAndTcpAndAveragedBatchNorm) {
  const auto f = spawn(train_args("file", {"distributed.nproc_per_node=2", "train.epochs=1",
                                           "distributed.init_method=file://" + *dir_ / "rendezvous",
                                           "distributed.bn_sync=average"}),
                       {}, run_dir("file") + ".log");
  ASSERT_EQ(wait_exit(f, 90), 0) << test::read_file(run_dir("file") + ".log");
  EXPECT_NE(test::read_file(run_dir("file") + ".log").find("init file://"), std::string::npos);
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string(pick_free_port());
  const auto t = spawn(
      train_args("tcp", {"distributed.nproc_per_node=2", "train.epochs=1", "distributed.init_method=" + tcp}),
      {}, run_dir("tcp") + ".log");
  ASSERT_EQ(wait_exit(t, 90), 0) << test::read_file(run_dir("tcp") + ".log");
  EXPECT_NE(test::read_file(run_dir("tcp") + ".log").find("init " + tcp), std::string::npos);
}

// One epoch of `train` with two NCCL ranks, one GPU each: the GPU path of a multi-GPU host end to end
// (skipped below two GPUs, saying why).
TEST_F(DistributedCliTest, TwoGpusTrainAnEpochOverNccl) {
  const int64_t gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (gpus < 2 || !nccl_available())
    GTEST_SKIP() << "needs 2 CUDA GPUs and NCCL; this host shows " << gpus << " GPU(s)";
  const std::string run = run_dir("nccl");
  const auto p = spawn(train_args("nccl", {"distributed.nproc_per_node=2", "train.epochs=1",
                                           "train.device=cuda", "distributed.backend=nccl"}),
                       {}, run + ".log");
  ASSERT_EQ(wait_exit(p, 300), 0) << test::read_file(run + ".log");
  const std::string log = test::read_file(run + ".log");
  EXPECT_NE(log.find("world size 2, 2 ranks per node, backend nccl, device cuda:0"), std::string::npos)
      << log;
  const auto metrics = test::read_metrics(run);
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_GT(metrics[0]["val_auc_mean"].get<double>(), 0.0);
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/last.pt"));
}

TEST_F(DistributedCliTest, APeerThatNeverArrivesIsAnErrorNamingHowManyJoined) {
  const auto start = Clock::now();
  const auto p = spawn(train_args("alone", {"distributed.timeout_seconds=2"}),
                       {{"RANK", "0"},
                        {"WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", std::to_string(pick_free_port())}},
                       run_dir("alone") + ".log");
  const int status = wait_exit(p, 30);
  const std::string log = test::read_file(run_dir("alone") + ".log");
  EXPECT_GT(status, 0) << log;
  EXPECT_LT(status, 128) << "crashed: " << log;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 15.0);
  EXPECT_NE(log.find("error: rendezvous timed out after 2 s: 1 of 2 ranks joined"), std::string::npos) << log;
}

TEST_F(DistributedCliTest, WorkersDieWithTheirLauncher) {
  const std::string run = run_dir("orphans");
  const pid_t launcher =
      spawn(train_args("orphans", {"distributed.nproc_per_node=2", "train.epochs=500"}), {}, run + ".log");
  ASSERT_TRUE(wait_for_file(run + "/checkpoints/last.pt", 60)) << test::read_file(run + ".log");
  ::kill(launcher, SIGKILL);
  EXPECT_EQ(wait_exit(launcher, 10), 128 + SIGKILL);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!processes_mentioning(run).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(processes_mentioning(run).empty()) << "workers outlived their launcher";
}

TEST_F(DistributedCliTest, ResumingATwoRankRunEqualsTheUninterruptedRun) {
  expect_resume_equals_uninterrupted("full", {});
  // With synchronised BatchNorm too.
  expect_resume_equals_uninterrupted("sync", {"distributed.bn_sync=sync"});
  EXPECT_NE(test::read_file(run_dir("sync") + ".log")
                .find(" BatchNorm layers normalise over all 2 ranks' batches (bn_sync: sync)"),
            std::string::npos);

  // Another world size resumes too, with a warning.
  auto one = train_args("one", {"distributed.nproc_per_node=1", "train.epochs=3"});
  one.insert(one.end(), {"--resume", run_dir("full") + "/checkpoints/epoch_002.pt"});
  const auto single = spawn(one, {}, run_dir("one") + ".log");
  ASSERT_EQ(wait_exit(single, 120), 0) << test::read_file(run_dir("one") + ".log");
  EXPECT_NE(test::read_file(run_dir("one") + ".log").find("written by 2 processes with 1"),
            std::string::npos);
  EXPECT_EQ(test::read_metrics(run_dir("one")).back()["epoch"].get<int64_t>(), 3);
}

}  // namespace
}  // namespace ranzcr
