#include "distributed/world.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/check.h"
#include "core/digits.h"

extern char** environ;

namespace ranzcr {
namespace {

const std::string* get(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int get_int(const EnvMap& env, const std::string& key, int fallback, int min_value = 0) {
  const std::string* v = get(env, key);
  if (!v) return fallback;
  const std::optional<int> value = parse_digits(*v, 9);  // launchers write plain digits
  RANZCR_CHECK(value && *value >= min_value, "environment variable ", key, "='", *v,
               "': expected an integer >= ", min_value);
  return *value;
}

void check(const WorldInfo& w, const std::string& source) {
  RANZCR_CHECK(w.rank < w.world_size, source, ": rank ", w.rank, " is not below the world size ",
               w.world_size);
  RANZCR_CHECK(w.local_rank < w.local_world_size, source, ": local rank ", w.local_rank,
               " is not below the local world size ", w.local_world_size);
  RANZCR_CHECK(w.master_port >= 1 && w.master_port <= 65535, source,
               ": MASTER_PORT must be in 1..65535, got ", w.master_port);
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry at bracket depth 0, then each [..] replaced by its first number, padding kept.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    first += c;
  }
  std::string host;
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i] != '[') {
      host += first[i];
      continue;
    }
    const size_t close = first.find(']', i);
    const std::string inside =
        first.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
    host += inside.substr(0, inside.find_first_of(",-"));
    if (close == std::string::npos) break;
    i = close;
  }
  return host;
}

int slurm_port(int64_t job_id, int64_t step_id) {
  // 312 consecutive jobs x 64 steps each get distinct ports in 20000..39967.
  return 20000 + static_cast<int>((job_id % 312) * 64 + step_id % 64);
}

namespace {

// Master host and port of a Slurm job step: the step's first node (not the allocation's), a port from
// the job and step ids (two steps of one allocation may run at once).
void slurm_master(const EnvMap& env, std::string* addr, int* port) {
  const std::string* nodes = get(env, "SLURM_STEP_NODELIST");
  if (!nodes) nodes = get(env, "SLURM_JOB_NODELIST");
  if (!nodes) nodes = get(env, "SLURM_NODELIST");
  if (nodes) *addr = first_slurm_host(*nodes);
  const int job = get_int(env, "SLURM_JOB_ID", -1);
  if (job < 0) return;
  int step = get_int(env, "SLURM_STEP_ID", -1);
  if (step < 0) step = get_int(env, "SLURM_STEPID", 0);
  *port = slurm_port(job, step);
}

// sbatch --ntasks=N runs the batch script once; only srun starts the N tasks (and sets the step ids).
void require_srun_task(const EnvMap& env) {
  if (get_int(env, "SLURM_NTASKS", 1, 1) <= 1 || get(env, "SLURM_STEP_ID") || get(env, "SLURM_STEPID"))
    return;
  RANZCR_FAIL("Slurm: the job has SLURM_NTASKS=", *get(env, "SLURM_NTASKS"),
              " tasks but this process is its batch script, not one of them: start the "
              "binary with srun (srun ./ranzcr train ...), which runs it once per task");
}

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kSelf:
      return "self";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kSlurm:
      return "slurm";
    case Launcher::kKubernetes:
      return "kubernetes";
    case Launcher::kEnv:
      return "env";
    case Launcher::kSingle:
      break;
  }
  return "single";
}

std::optional<WorldInfo> worker_from_env(const EnvMap& env, bool slurm_tasks_are_nodes) {
  WorldInfo w;
  if (const auto* ifname = get(env, "GLOO_SOCKET_IFNAME")) w.gloo_interface = *ifname;
  auto common = [&](WorldInfo& info) {
    if (const auto* a = get(env, "MASTER_ADDR")) info.master_addr = *a;
    info.master_port = get_int(env, "MASTER_PORT", info.master_port, 1);
  };
  if (get(env, "TORCHELASTIC_RUN_ID") || get(env, "TORCHELASTIC_USE_AGENT_STORE")) {
    w.launcher = Launcher::kTorchrun;
    w.rank = get_int(env, "RANK", 0);
    w.world_size = get_int(env, "WORLD_SIZE", 1, 1);
    w.local_rank = get_int(env, "LOCAL_RANK", 0);
    w.local_world_size = get_int(env, "LOCAL_WORLD_SIZE", 1, 1);
    w.node_rank = get_int(env, "GROUP_RANK", 0);
    common(w);
    const auto* agent = get(env, "TORCHELASTIC_USE_AGENT_STORE");
    w.external_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    if (w.external_store)
      w.store_prefix = "/worker/attempt_" + std::to_string(get_int(env, "TORCHELASTIC_RESTART_COUNT", 0));
    check(w, "torchrun environment");
    return w;
  }
  if (get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS") && !slurm_tasks_are_nodes && !get(env, "RANK")) {
    w.launcher = Launcher::kSlurm;
    require_srun_task(env);
    w.rank = get_int(env, "SLURM_PROCID", 0);
    w.world_size = get_int(env, "SLURM_NTASKS", 1, 1);
    w.local_rank = get_int(env, "SLURM_LOCALID", 0);
    // Tasks on this node: --ntasks-per-node, else the first count of SLURM_STEP_TASKS_PER_NODE ("4(x2)").
    w.local_world_size = get_int(env, "SLURM_NTASKS_PER_NODE", 0);
    if (w.local_world_size == 0) {
      const auto* tpn = get(env, "SLURM_STEP_TASKS_PER_NODE");
      if (!tpn) tpn = get(env, "SLURM_TASKS_PER_NODE");
      w.local_world_size =
          tpn ? parse_digits(tpn->substr(0, tpn->find_first_not_of("0123456789")), 9).value_or(1) : 1;
    }
    w.local_world_size = std::max(w.local_world_size, w.local_rank + 1);
    w.node_rank = get_int(env, "SLURM_NODEID", 0);
    slurm_master(env, &w.master_addr, &w.master_port);
    common(w);  // MASTER_ADDR / MASTER_PORT, when set, win
    check(w, "Slurm environment");
    return w;
  }
  if (get(env, "RANK") && get(env, "WORLD_SIZE")) {
    const std::string* ours = get(env, "RANZCR_LAUNCHER");  // ranzcr's launcher sets it (launcher.cpp)
    RANZCR_CHECK(!ours || *ours == "self", "environment variable RANZCR_LAUNCHER='", *ours,
                 "': expected self (set by ranzcr's own launcher) or unset");
    w.launcher = ours                                                            ? Launcher::kSelf
                 : get(env, "PET_NNODES") || get(env, "KUBERNETES_SERVICE_HOST") ? Launcher::kKubernetes
                                                                                 : Launcher::kEnv;
    w.rank = get_int(env, "RANK", 0);
    w.world_size = get_int(env, "WORLD_SIZE", 1, 1);
    w.local_rank = get_int(env, "LOCAL_RANK", 0);
    w.local_world_size = get_int(env, "LOCAL_WORLD_SIZE", 1, 1);
    w.node_rank = get_int(env, "NODE_RANK", get_int(env, "GROUP_RANK", 0));
    w.external_store = get(env, "RANZCR_STORE_HOSTED") != nullptr;  // our launcher hosts it
    common(w);
    check(w, "RANK/WORLD_SIZE environment");
    return w;
  }
  return std::nullopt;
}

NodePlan node_plan_from_env(const EnvMap& env, bool slurm_tasks_are_nodes) {
  NodePlan plan;
  if (get(env, "NNODES") || get(env, "PET_NNODES")) {
    const bool pet = !get(env, "NNODES");
    plan.source = pet ? "PET_NNODES/PET_NODE_RANK" : "NNODES/NODE_RANK";
    plan.nnodes = get_int(env, pet ? "PET_NNODES" : "NNODES", 1, 1);
    plan.node_rank = get_int(env, pet ? "PET_NODE_RANK" : "NODE_RANK", 0);
  } else if (slurm_tasks_are_nodes && get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS")) {
    plan.source = "Slurm tasks";
    require_srun_task(env);
    plan.nnodes = get_int(env, "SLURM_NTASKS", 1, 1);
    plan.node_rank = get_int(env, "SLURM_PROCID", 0);
    slurm_master(env, &plan.master_addr, &plan.master_port);
  }
  if (const auto* a = get(env, "MASTER_ADDR")) plan.master_addr = *a;
  plan.master_port = get_int(env, "MASTER_PORT", plan.master_port, 1);
  RANZCR_CHECK(plan.node_rank < plan.nnodes, plan.source, ": node rank ", plan.node_rank,
               " is not below the number of nodes ", plan.nnodes);
  RANZCR_CHECK(plan.nnodes <= 1 || plan.source == "Slurm tasks" || get(env, "MASTER_ADDR"), plan.source,
               ": a job of ", plan.nnodes,
               " nodes needs MASTER_ADDR (node 0's address, reachable from every node) and "
               "MASTER_PORT set on every node");
  RANZCR_CHECK(plan.nnodes <= 1 || plan.master_port != 0,
               "a multi-node job needs MASTER_PORT (and MASTER_ADDR) set on every node");
  return plan;
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  if (visible_gpus <= 1) return 0;
  return local_rank % visible_gpus;
}

bool gpus_assigned_per_rank(const EnvMap& env, const WorldInfo& world) {
  if (world.launcher == Launcher::kSelf || world.launcher == Launcher::kSingle)
    return false;  // one environment for all
  if (world.launcher == Launcher::kSlurm) {
    // srun --gpus-per-task, or a node with a GPU for every task (--gpu-bind then shows each task its
    // own); --gres=gpu:N with more tasks than N gives every task the same CUDA_VISIBLE_DEVICES.
    if (get(env, "SLURM_GPUS_PER_TASK")) return true;
    const int on_node = get_int(env, "SLURM_GPUS_ON_NODE", 0);
    return on_node > 0 && on_node >= world.local_world_size;
  }
  return get(env, "CUDA_VISIBLE_DEVICES") != nullptr;
}

bool local_ranks_share_gpu(int local_world_size, int visible_gpus, bool own_gpus) {
  return visible_gpus > 0 && local_world_size > visible_gpus && !own_gpus;
}

}  // namespace ranzcr

namespace ranzcr {

int cpus_from_cgroup_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  double q = 0;
  try {
    q = std::stod(quota);
  } catch (const std::exception&) {
    return 0;
  }
  return q > 0 ? std::max(1, static_cast<int>(std::ceil(q / period))) : 0;
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tightest CPU quota of this process's cgroup v2 and its ancestors, else cgroup v1's; 0 = none.
int cgroup_cpu_limit() {
  int limit = 0;
  auto tighten = [&](int cpus) {
    if (cpus > 0) limit = limit == 0 ? cpus : std::min(limit, cpus);
  };
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) {  // v2: "0::/path"
      for (std::filesystem::path p = "/sys/fs/cgroup" + line.substr(3);; p = p.parent_path()) {
        tighten(cpus_from_cgroup_max(read_text((p / "cpu.max").string())));
        if (p == "/sys/fs/cgroup" || p == p.parent_path()) break;
      }
    }
  }
  const std::string q = read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");  // v1
  const std::string period = read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (!q.empty() && !period.empty() && q[0] != '-') tighten(cpus_from_cgroup_max(q + " " + period));
  return limit;
}

}  // namespace

int usable_cpus(const EnvMap& env) {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (const int quota = cgroup_cpu_limit(); quota > 0) cpus = std::min(cpus, quota);
  // Slurm without CPU binding (task/none) says only this.
  if (get(env, "SLURM_CPUS_PER_TASK") && get(env, "SLURM_JOB_ID"))
    cpus = std::min(cpus, get_int(env, "SLURM_CPUS_PER_TASK", cpus, 1));
  return std::max(1, cpus);
}

}  // namespace ranzcr
