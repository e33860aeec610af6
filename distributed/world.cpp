#include "distributed/world.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

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
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v->size() || value < min_value)
    throw std::runtime_error("environment variable " + key + "='" + *v +
                             "': expected an integer >= " + std::to_string(min_value));
  return value;
}

void check(const WorldInfo& w, const std::string& source) {
  if (w.rank >= w.world_size)
    throw std::runtime_error(source + ": rank " + std::to_string(w.rank) + " is not below the world size " +
                             std::to_string(w.world_size));
  if (w.local_rank >= w.local_world_size)
    throw std::runtime_error(source + ": local rank " + std::to_string(w.local_rank) +
                             " is not below the local world size " + std::to_string(w.local_world_size));
  if (w.master_port < 1 || w.master_port > 65535)
    throw std::runtime_error(source + ": MASTER_PORT must be in 1..65535, got " +
                             std::to_string(w.master_port));
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
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  const std::string inside = first.substr(open + 1, first.find(']') - open - 1);
  const size_t stop = inside.find_first_of(",-");
  return first.substr(0, open) + inside.substr(0, stop);
}

std::optional<WorldInfo> worker_from_env(const EnvMap& env, bool slurm_tasks_are_nodes) {
  WorldInfo w;
  if (const auto* ifname = get(env, "GLOO_SOCKET_IFNAME")) w.gloo_interface = *ifname;
  auto common = [&](WorldInfo& info) {
    if (const auto* a = get(env, "MASTER_ADDR")) info.master_addr = *a;
    info.master_port = get_int(env, "MASTER_PORT", info.master_port, 1);
  };
  if (get(env, "TORCHELASTIC_RUN_ID") || get(env, "TORCHELASTIC_USE_AGENT_STORE")) {
    w.launcher = "torchrun";
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
    w.launcher = "slurm";
    w.rank = get_int(env, "SLURM_PROCID", 0);
    w.world_size = get_int(env, "SLURM_NTASKS", 1, 1);
    w.local_rank = get_int(env, "SLURM_LOCALID", 0);
    // Tasks on this node: --ntasks-per-node, else the first count of SLURM_STEP_TASKS_PER_NODE ("4(x2)").
    w.local_world_size = get_int(env, "SLURM_NTASKS_PER_NODE", 0);
    if (w.local_world_size == 0) {
      const auto* tpn = get(env, "SLURM_STEP_TASKS_PER_NODE");
      if (!tpn) tpn = get(env, "SLURM_TASKS_PER_NODE");
      w.local_world_size = tpn && std::isdigit(static_cast<unsigned char>((*tpn)[0])) ? std::stoi(*tpn) : 1;
    }
    w.local_world_size = std::max(w.local_world_size, w.local_rank + 1);
    w.node_rank = get_int(env, "SLURM_NODEID", 0);
    if (const auto* nodes = get(env, "SLURM_JOB_NODELIST")) w.master_addr = first_slurm_host(*nodes);
    if (const auto* job = get(env, "SLURM_JOB_ID")) w.master_port = 20000 + std::stoi(*job) % 20000;
    common(w);  // MASTER_ADDR / MASTER_PORT, when set, win
    check(w, "Slurm environment");
    return w;
  }
  if (get(env, "RANK") && get(env, "WORLD_SIZE")) {
    w.launcher = get(env, "RANZCR_LAUNCHER") ? *get(env, "RANZCR_LAUNCHER")
                 : get(env, "PET_NNODES") || get(env, "KUBERNETES_SERVICE_HOST") ? "kubernetes"
                                                                                 : "env";
    w.rank = get_int(env, "RANK", 0);
    w.world_size = get_int(env, "WORLD_SIZE", 1, 1);
    w.local_rank = get_int(env, "LOCAL_RANK", 0);
    w.local_world_size = get_int(env, "LOCAL_WORLD_SIZE", 1, 1);
    w.node_rank = get_int(env, "NODE_RANK", get_int(env, "GROUP_RANK", 0));
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
    plan.nnodes = get_int(env, "SLURM_NTASKS", 1, 1);
    plan.node_rank = get_int(env, "SLURM_PROCID", 0);
    if (const auto* nodes = get(env, "SLURM_JOB_NODELIST")) plan.master_addr = first_slurm_host(*nodes);
    if (const auto* job = get(env, "SLURM_JOB_ID")) plan.master_port = 20000 + std::stoi(*job) % 20000;
  }
  if (const auto* a = get(env, "MASTER_ADDR")) plan.master_addr = *a;
  plan.master_port = get_int(env, "MASTER_PORT", plan.master_port, 1);
  if (plan.node_rank >= plan.nnodes)
    throw std::runtime_error(plan.source + ": node rank " + std::to_string(plan.node_rank) +
                             " is not below the number of nodes " + std::to_string(plan.nnodes));
  if (plan.nnodes > 1 && plan.master_port == 0)
    throw std::runtime_error("a multi-node job needs MASTER_PORT (and MASTER_ADDR) set on every node");
  return plan;
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  if (visible_gpus <= 1) return 0;
  return local_rank % visible_gpus;
}

}  // namespace ranzcr
