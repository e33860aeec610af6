#include "distributed/world.h"

#include <sched.h>

#include <gtest/gtest.h>

namespace ranzcr {
namespace {

TEST(World, NotAWorkerWithoutLauncherVariables) {
  EXPECT_FALSE(worker_from_env({{"HOME", "/root"}}, false).has_value());
  EXPECT_FALSE(worker_from_env({{"RANK", "1"}}, false).has_value());  // RANK alone is not enough
}

TEST(World, TorchrunWithAgentStore) {
  const EnvMap env = {{"RANK", "3"},
                      {"LOCAL_RANK", "1"},
                      {"WORLD_SIZE", "4"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"GROUP_RANK", "1"},
                      {"MASTER_ADDR", "node7"},
                      {"MASTER_PORT", "29400"},
                      {"TORCHELASTIC_RUN_ID", "abc"},
                      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                      {"TORCHELASTIC_RESTART_COUNT", "2"}};
  const auto w = worker_from_env(env, false);
  ASSERT_TRUE(w);
  EXPECT_STREQ(launcher_name(w->launcher), "torchrun");
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->world_size, 4);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->node_rank, 1);
  EXPECT_EQ(w->master_addr, "node7");
  EXPECT_EQ(w->master_port, 29400);
  EXPECT_TRUE(w->external_store);
  EXPECT_EQ(w->store_prefix, "/worker/attempt_2");
}

TEST(World, Slurm) {
  EnvMap env = {{"SLURM_PROCID", "5"},
                {"SLURM_NTASKS", "8"},
                {"SLURM_LOCALID", "1"},
                {"SLURM_NODEID", "2"},
                {"SLURM_STEP_TASKS_PER_NODE", "2(x4)"},
                {"SLURM_JOB_NODELIST", "gpu[07-10],cpu1"},
                {"SLURM_STEP_NODELIST", "gpu[08-10],cpu1"},  // the step's nodes, not the allocation's
                {"SLURM_STEP_ID", "3"},
                {"SLURM_JOB_ID", "123456"}};
  const auto w = worker_from_env(env, false);
  ASSERT_TRUE(w);
  EXPECT_STREQ(launcher_name(w->launcher), "slurm");
  EXPECT_EQ(w->rank, 5);
  EXPECT_EQ(w->world_size, 8);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->node_rank, 2);
  EXPECT_EQ(w->master_addr, "gpu08");
  EXPECT_EQ(w->master_port, slurm_port(123456, 3));
  EXPECT_FALSE(w->external_store);
  // One task per node that launches its own workers: the tasks are nodes, not workers.
  EXPECT_FALSE(worker_from_env(env, true).has_value());
  const NodePlan plan = node_plan_from_env(env, true);
  EXPECT_EQ(plan.nnodes, 8);
  EXPECT_EQ(plan.node_rank, 5);
  EXPECT_EQ(plan.master_addr, "gpu08");
  EXPECT_EQ(plan.master_port, slurm_port(123456, 3));
}

// Two steps of one allocation running at once get different ports; ports stay in range.
TEST(World, SlurmPortsDifferPerStep) {
  EXPECT_NE(slurm_port(77, 0), slurm_port(77, 1));
  EXPECT_NE(slurm_port(77, 0), slurm_port(78, 0));
  for (int64_t job : {0, 1, 311, 312, 99999999})
    for (int64_t step : {0, 1, 63, 64}) {
      EXPECT_GE(slurm_port(job, step), 20000);
      EXPECT_LE(slurm_port(job, step), 39999);
    }
}

// sbatch --ntasks=2 running the binary without srun: the batch script is not a task; say so at once
// instead of waiting for a second rank that never comes.
TEST(World, SlurmBatchScriptWithoutSrunIsAnError) {
  const EnvMap batch = {{"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_LOCALID", "0"},
                        {"SLURM_JOB_ID", "15"},
                        {"SLURM_JOB_NODELIST", "vm"}};
  try {
    worker_from_env(batch, false);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("srun"), std::string::npos) << e.what();
  }
  EXPECT_THROW(node_plan_from_env(batch, true), std::runtime_error);
  EnvMap single = batch;
  single["SLURM_NTASKS"] = "1";  // a one-task batch script is fine
  EXPECT_NO_THROW(worker_from_env(single, false));
  EnvMap task = batch;
  task["SLURM_STEP_ID"] = "0";
  EXPECT_EQ(worker_from_env(task, false)->world_size, 2);
}

TEST(World, SlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node[01-04]"), "node01");
  EXPECT_EQ(first_slurm_host("a[3,5-7],b2"), "a3");
  EXPECT_EQ(first_slurm_host("x1,y[1-2]"), "x1");
  EXPECT_EQ(first_slurm_host("rack[1-2]-node[01-02]"), "rack1-node01");
  EXPECT_EQ(first_slurm_host("rack[3,5]-node[07-09],login1"), "rack3-node07");
  EXPECT_EQ(first_slurm_host("gpu-a100-[005-008]"), "gpu-a100-005");
}

TEST(World, PlainEnvAndKubernetes) {
  const auto w = worker_from_env({{"RANK", "1"},
                                  {"WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "job-master-0"},
                                  {"MASTER_PORT", "23456"},
                                  {"KUBERNETES_SERVICE_HOST", "10.0.0.1"}},
                                 false);
  ASSERT_TRUE(w);
  EXPECT_STREQ(launcher_name(w->launcher), "kubernetes");
  EXPECT_EQ(w->rank, 1);
  EXPECT_EQ(w->local_rank, 0);
  EXPECT_EQ(w->master_addr, "job-master-0");
  const auto self = worker_from_env({{"RANK", "0"},
                                     {"WORLD_SIZE", "2"},
                                     {"RANZCR_LAUNCHER", "self"},
                                     {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_PORT", "1234"}},
                                    false);
  ASSERT_TRUE(self);
  EXPECT_STREQ(launcher_name(self->launcher), "self");
  EXPECT_EQ(self->local_world_size, 2);
  // Elastic PyTorchJob: PET_* variables describe the nodes; each pod launches its workers.
  const NodePlan plan = node_plan_from_env(
      {{"PET_NNODES", "3"}, {"PET_NODE_RANK", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29500"}}, false);
  EXPECT_EQ(plan.nnodes, 3);
  EXPECT_EQ(plan.node_rank, 2);
  EXPECT_EQ(plan.master_port, 29500);
}

TEST(World, MultiNodeSelfLaunchPlan) {
  const NodePlan p = node_plan_from_env(
      {{"NNODES", "2"}, {"NODE_RANK", "1"}, {"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29501"}}, false);
  EXPECT_EQ(p.nnodes, 2);
  EXPECT_EQ(p.node_rank, 1);
  EXPECT_EQ(p.master_addr, "10.1.1.1");
  EXPECT_EQ(node_plan_from_env({}, false).master_port, 0);  // one node: pick a free port
}

TEST(World, MalformedVariablesAreErrors) {
  EXPECT_THROW(worker_from_env({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, false), std::runtime_error);
  EXPECT_THROW(worker_from_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, false), std::runtime_error);
  EXPECT_THROW(node_plan_from_env({{"NNODES", "2"}, {"NODE_RANK", "2"}, {"MASTER_PORT", "1"}}, false),
               std::runtime_error);
  EXPECT_THROW(node_plan_from_env({{"NNODES", "2"}, {"NODE_RANK", "0"}}, false), std::runtime_error);
  // Several nodes without MASTER_ADDR: an error now, not a 127.0.0.1 rendezvous that times out later.
  try {
    node_plan_from_env({{"NNODES", "2"}, {"NODE_RANK", "1"}, {"MASTER_PORT", "29500"}}, false);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
}

// Our launcher hosts the store: its workers join as clients.
TEST(World, SelfLaunchedWorkersUseTheLaunchersStore) {
  EnvMap env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "41000"}, {"RANZCR_LAUNCHER", "self"}};
  EXPECT_FALSE(worker_from_env(env, false)->external_store);
  env["RANZCR_STORE_HOSTED"] = "1";
  EXPECT_TRUE(worker_from_env(env, false)->external_store);
}

TEST(World, UsableCpus) {
  EXPECT_EQ(cpus_from_cgroup_max("max 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_max("200000 100000"), 2);
  EXPECT_EQ(cpus_from_cgroup_max("150000 100000\n"), 2);  // 1.5 CPUs: two threads
  EXPECT_EQ(cpus_from_cgroup_max("50000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_max(""), 0);
  const int all = usable_cpus({});
  EXPECT_GE(all, 1);
  EXPECT_EQ(usable_cpus({{"SLURM_JOB_ID", "1"}, {"SLURM_CPUS_PER_TASK", "1"}}), 1);
  // Pinned to one CPU (taskset, Slurm's task/affinity): one.
  cpu_set_t old_set, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof old_set, &old_set), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &old_set)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  const int pinned = usable_cpus({});
  ::sched_setaffinity(0, sizeof old_set, &old_set);
  EXPECT_EQ(pinned, 1);
}

TEST(World, GpuForLocalRank) {
  EXPECT_EQ(gpu_for_local_rank(0, 4), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4), 3);
  EXPECT_EQ(gpu_for_local_rank(5, 4), 1);  // more ranks than GPUs: round robin
  // One visible GPU per rank (Slurm --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank): always that one.
  EXPECT_EQ(gpu_for_local_rank(0, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(7, 1), 0);
}

// Ranks truly share a GPU only when more of them than the GPUs they see are on a node and nobody gave
// each its own: srun --gpus-per-task=1 (8 tasks, each seeing 1 GPU) is fine, our own 2 workers on a
// one-GPU host are not.
TEST(World, RanksShareAGpuOnlyWhenNotGivenTheirOwn) {
  const EnvMap slurm = {{"SLURM_PROCID", "3"},          {"SLURM_NTASKS", "8"},
                        {"SLURM_LOCALID", "3"},         {"SLURM_NTASKS_PER_NODE", "8"},
                        {"SLURM_JOB_NODELIST", "gpu1"}, {"SLURM_STEP_ID", "0"},
                        {"SLURM_GPUS_PER_TASK", "1"},   {"CUDA_VISIBLE_DEVICES", "0"}};
  const WorldInfo slurm_world = *worker_from_env(slurm, false);
  ASSERT_EQ(slurm_world.local_world_size, 8);
  EXPECT_TRUE(gpus_assigned_per_rank(slurm, slurm_world));
  EXPECT_FALSE(local_ranks_share_gpu(8, 1, gpus_assigned_per_rank(slurm, slurm_world)));
  EnvMap bare = slurm;  // srun --gpus-per-task without device binding sets only this
  bare.erase("CUDA_VISIBLE_DEVICES");
  EXPECT_TRUE(gpus_assigned_per_rank(bare, *worker_from_env(bare, false)));
  bare.erase("SLURM_GPUS_PER_TASK");  // 8 tasks and nothing says they got GPUs of their own
  EXPECT_FALSE(gpus_assigned_per_rank(bare, *worker_from_env(bare, false)));
  EXPECT_TRUE(local_ranks_share_gpu(8, 1, false));
  // srun --gres=gpu:4 with 8 tasks: every task sees the same 4 GPUs, so two tasks share each.
  EnvMap gres = bare;
  gres["SLURM_GPUS_ON_NODE"] = "4";
  gres["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";
  EXPECT_FALSE(gpus_assigned_per_rank(gres, *worker_from_env(gres, false)));
  EXPECT_TRUE(local_ranks_share_gpu(8, 4, false));
  // srun --gres=gpu:8 --gpu-bind=single:1 with 8 tasks: a GPU of its own each, one visible.
  gres["SLURM_GPUS_ON_NODE"] = "8";
  gres["CUDA_VISIBLE_DEVICES"] = "3";
  EXPECT_TRUE(gpus_assigned_per_rank(gres, *worker_from_env(gres, false)));

  // torchrun (or a wrapper) with CUDA_VISIBLE_DEVICES per rank.
  const EnvMap torchrun = {{"TORCHELASTIC_RUN_ID", "x"}, {"RANK", "1"},
                           {"WORLD_SIZE", "2"},          {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "2"},    {"CUDA_VISIBLE_DEVICES", "1"}};
  EXPECT_TRUE(gpus_assigned_per_rank(torchrun, *worker_from_env(torchrun, false)));
  EnvMap torchrun_all = torchrun;
  torchrun_all.erase("CUDA_VISIBLE_DEVICES");
  EXPECT_FALSE(gpus_assigned_per_rank(torchrun_all, *worker_from_env(torchrun_all, false)));

  // Our own workers inherit one environment: CUDA_VISIBLE_DEVICES is the same for all of them.
  const EnvMap self = {{"RANK", "1"},
                       {"WORLD_SIZE", "2"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "2"},
                       {"RANZCR_LAUNCHER", "self"},
                       {"CUDA_VISIBLE_DEVICES", "0"}};
  const WorldInfo self_world = *worker_from_env(self, false);
  EXPECT_FALSE(gpus_assigned_per_rank(self, self_world));
  EXPECT_TRUE(local_ranks_share_gpu(2, 1, false));                                     // two workers, one GPU
  EXPECT_FALSE(gpus_assigned_per_rank({{"CUDA_VISIBLE_DEVICES", "0"}}, WorldInfo{}));  // one process

  EXPECT_FALSE(local_ranks_share_gpu(2, 2, false));  // one GPU each
  EXPECT_FALSE(local_ranks_share_gpu(4, 8, false));
  EXPECT_FALSE(local_ranks_share_gpu(2, 0, false));  // no GPU: nothing to share (CPU ranks)
  EXPECT_FALSE(local_ranks_share_gpu(1, 1, false));
}

}  // namespace
}  // namespace ranzcr
