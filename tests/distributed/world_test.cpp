#include "distributed/world.h"

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
  EXPECT_EQ(w->launcher, "torchrun");
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
                {"SLURM_JOB_ID", "123456"}};
  const auto w = worker_from_env(env, false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->launcher, "slurm");
  EXPECT_EQ(w->rank, 5);
  EXPECT_EQ(w->world_size, 8);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->node_rank, 2);
  EXPECT_EQ(w->master_addr, "gpu07");
  EXPECT_EQ(w->master_port, 20000 + 123456 % 20000);
  EXPECT_FALSE(w->external_store);
  // One task per node that launches its own workers: the tasks are nodes, not workers.
  EXPECT_FALSE(worker_from_env(env, true).has_value());
  const NodePlan plan = node_plan_from_env(env, true);
  EXPECT_EQ(plan.nnodes, 8);
  EXPECT_EQ(plan.node_rank, 5);
  EXPECT_EQ(plan.master_addr, "gpu07");
}

TEST(World, SlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node[01-04]"), "node01");
  EXPECT_EQ(first_slurm_host("a[3,5-7],b2"), "a3");
  EXPECT_EQ(first_slurm_host("x1,y[1-2]"), "x1");
}

TEST(World, PlainEnvAndKubernetes) {
  const auto w = worker_from_env({{"RANK", "1"},
                                  {"WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "job-master-0"},
                                  {"MASTER_PORT", "23456"},
                                  {"KUBERNETES_SERVICE_HOST", "10.0.0.1"}},
                                 false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->launcher, "kubernetes");
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
  EXPECT_EQ(self->launcher, "self");
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
}

TEST(World, GpuForLocalRank) {
  EXPECT_EQ(gpu_for_local_rank(0, 4), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4), 3);
  EXPECT_EQ(gpu_for_local_rank(5, 4), 1);  // more ranks than GPUs: round robin
  // One visible GPU per rank (Slurm --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank): always that one.
  EXPECT_EQ(gpu_for_local_rank(0, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(7, 1), 0);
}

}  // namespace
}  // namespace ranzcr
