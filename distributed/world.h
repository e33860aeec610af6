// Who this process is in a job: resolved from the environment that a launcher set (torchrun, Slurm,
// plain RANK/WORLD_SIZE, Kubernetes PyTorchJob), or the plan for launching workers ourselves.
// This and apps/ are the only places that read environment variables.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace ranzcr {

using EnvMap = std::map<std::string, std::string>;

/// The process environment as a map.
EnvMap current_environment();

/// Who started this process: nobody (one process, no group), ranzcr's own launcher, torchrun, srun,
/// a Kubernetes PyTorchJob, or another launcher that set RANK and WORLD_SIZE.
enum class Launcher { kSingle, kSelf, kTorchrun, kSlurm, kKubernetes, kEnv };
/// "single", "self", "torchrun", "slurm", "kubernetes" or "env" (log lines).
const char* launcher_name(Launcher launcher);

struct WorldInfo {
  Launcher launcher = Launcher::kSingle;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_prefix;     // torchrun: "/worker/attempt_<restart count>"
  bool external_store = false;  // torchrun's agent hosts the store: rank 0 is a client too
  std::string gloo_interface;   // GLOO_SOCKET_IFNAME
};

/// The worker identity when a launcher started this process as a worker, in this order: torchrun
/// (TORCHELASTIC_*), Slurm (SLURM_PROCID/SLURM_NTASKS, unless `slurm_tasks_are_nodes`), plain RANK and
/// WORLD_SIZE (our own self-launched workers and Kubernetes PyTorchJob pods). nullopt: not a worker.
/// Throws std::runtime_error naming the variable when one is malformed.
std::optional<WorldInfo> worker_from_env(const EnvMap& env, bool slurm_tasks_are_nodes);

/// Nodes of a self-launched job: NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT, else Kubernetes PET_NNODES/
/// PET_NODE_RANK, else Slurm tasks as nodes (when `slurm_tasks_are_nodes`), else one local node.
struct NodePlan {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port (one node only)
  std::string source = "local";
};
NodePlan node_plan_from_env(const EnvMap& env, bool slurm_tasks_are_nodes);

/// The GPU index for a process with `local_rank` when `visible_gpus` are visible to it: the single
/// visible GPU when there is one (Slurm --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank), else
/// local_rank modulo the visible count.
int gpu_for_local_rank(int local_rank, int visible_gpus);

/// Whether each rank on this node was given GPUs of its own, so that what this rank sees is not what the
/// others see. Slurm tasks: with SLURM_GPUS_PER_TASK (srun --gpus-per-task), or when the node holds a GPU
/// for every task (SLURM_GPUS_ON_NODE >= the tasks on the node, bound per task by --gpu-bind); not with
/// --gres=gpu:N shared by more than N tasks, whose CUDA_VISIBLE_DEVICES is the same for all. Other external
/// launchers (torchrun, a PyTorchJob, a wrapper script): with CUDA_VISIBLE_DEVICES set, taken as set per
/// rank (torchrun itself sets none). One rank cannot tell a job-wide CUDA_VISIBLE_DEVICES from its own:
/// ranks of a torchrun that outnumber the GPUs it lists pass this check, and the NCCL process group then
/// compares the ranks' GPU UUIDs through the store and refuses them with one line on every rank
/// (nccl_backend.cpp). Never for our own self-launched workers or a single process: they all inherit one
/// environment.
bool gpus_assigned_per_rank(const EnvMap& env, const WorldInfo& world);

/// Whether the `local_world_size` ranks of a node would put two ranks on one GPU when this rank sees
/// `visible_gpus` GPUs: more ranks than GPUs, unless each rank was given GPUs of its own (`own_gpus`,
/// gpus_assigned_per_rank). False without GPUs.
bool local_ranks_share_gpu(int local_world_size, int visible_gpus, bool own_gpus);

/// First host of a Slurm host list, full grammar: "gpu[07-09,12],cpu1" -> "gpu07",
/// "rack[1-2]-node[01-02]" -> "rack1-node01".
std::string first_slurm_host(const std::string& nodelist);

/// The rendezvous port of Slurm job step `step_id` of job `job_id` (steps of one job differ).
int slurm_port(int64_t job_id, int64_t step_id);

/// The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota and, under Slurm,
/// by SLURM_CPUS_PER_TASK (Slurm without CPU binding says it only there). At least 1.
int usable_cpus(const EnvMap& env);

/// CPUs allowed by a cgroup v2 `cpu.max` text ("150000 100000" -> 2, rounded up); 0 = no limit ("max").
int cpus_from_cgroup_max(const std::string& text);

}  // namespace ranzcr
