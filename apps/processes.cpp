#include "apps/processes.h"

#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "apps/hub_weights.h"
#include "apps/stop_signals.h"
#include "core/check.h"
#include "core/heap.h"
#include "data/dataset_index.h"
#include "data/synth.h"
#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "distributed/world.h"
#include "engine/runtime/placement.h"

namespace fs = std::filesystem;

namespace ranzcr {

int hardware_threads() {
  static const int n = usable_cpus(current_environment());
  return n;
}

void apply_job_settings(const Config& config) {
  keep_freed_heap_memory();
  if (config.train.num_threads > 0) torch::set_num_threads(config.train.num_threads);
}

void share_cores(const Config& config, int processes, const EnvMap& env) {
  if (config.train.num_threads == 0 && env.count("OMP_NUM_THREADS") == 0)
    torch::set_num_threads(std::max(1, hardware_threads() / processes));
}

// In a terminal: one line updated in place; in a log: a line per quarter.
void print_progress(int64_t done, int64_t total) {
  static const bool tty = ::isatty(STDOUT_FILENO);
  static int64_t last_quarter = -1;
  if (tty) {
    std::cout << "\rsynth: " << done << "/" << total << " images" << (done == total ? "\n" : "")
              << std::flush;
  } else if (done * 4 / std::max<int64_t>(total, 1) != last_quarter) {
    last_quarter = done * 4 / std::max<int64_t>(total, 1);
    std::cout << "synth: " << done << "/" << total << " images" << std::endl;
  }
}

namespace {

bool same_folder(const std::string& a, const std::string& b) {
  auto norm = [](const std::string& p) { return fs::absolute(fs::path(p) / "").lexically_normal(); };
  return norm(a) == norm(b);
}

// Makes sure data.root holds a data set: generates the synthetic one when the config asks for it and
// data.root is where it lives (synth.root; never into a mistyped data.root), otherwise explains how to
// get the data.
void ensure_dataset(const Config& config, RunLog& log) {
  const fs::path root(config.data.root);
  if (fs::exists(train_csv_path(config.data))) return;
  const SynthConfig& synth = config.synth;
  if (!synth.generate_if_missing || !same_folder(synth.root, config.data.root)) {
    const std::string note =
        synth.generate_if_missing
            ? " (the synthetic data set is generated only in synth.root, " + synth.root + ")"
            : "";
    RANZCR_FAIL("data set not found: ", train_csv_path(config.data),
                " (data.root). Put the Kaggle RANZCR CLiP data there (train.csv and train/), or generate a "
                "synthetic stand-in with: ./ranzcr synth --out ",
                root.string(), note);
  }
  RANZCR_CHECK(!fs::exists(root), root.string(), " exists but has no ", config.data.train_csv);
  const bool dicom = config.synth.format == SynthFormat::kDicom;
  RANZCR_CHECK(dicom == (config.data.image_ext == ".dcm"), "synth.format ", setting_name(config.synth.format),
               " writes ", dicom ? ".dcm" : ".jpg", " files, but data.image_ext is '", config.data.image_ext,
               "' (set both)");
  log.info("generating the synthetic data set in " + root.string() + " (" +
           std::to_string(config.synth.num_images) + " images, " + std::to_string(config.synth.image_size) +
           " px, " + (config.synth.format == SynthFormat::kDicom ? "DICOM, " : "") + "seed " +
           std::to_string(config.synth.seed) + "); done once");
  generate_synthetic(root.string(), config.synth, hardware_threads(), print_progress);
}

// The inputs a job reads, made ready once per node: the data set (the synthetic one generated) and the
// pretrained weights (fetched into the Hub cache). `fetch`: this process makes them (one process, a
// launcher, or a node's first worker); the others read what that one made (the cache only, no network).
// The job, model.pretrained resolved once (pretrained_source.h); a job that reads no data set is `config`.
Job prepare_inputs(const Config& config, const JobInputs& inputs, bool fetch, RunLog& log) {
  if (!inputs.dataset) return Job{config, ResolvedWeights{}};
  if (fetch) ensure_dataset(config, log);
  const ResolvedWeights weights =
      resolve_weights(config, hub_options(log), /*network=*/fetch, resumed_checkpoint(config, inputs.resume),
                      pretrained_log(log));
  return Job{config_with(config, weights), weights};
}

// One process of a multi-process job (started by us, torchrun, srun or a PyTorchJob).
int run_worker(const Config& config, const WorldInfo& world, const EnvMap& env, const JobInputs& inputs,
               const JobBody& body) {
  const Placement placement = place_process(config, world, env);
  const torch::Device device = placement.device;
  share_cores(config, world.local_world_size, env);
  ProcessGroupOptions pgo;
  pgo.backend = *placement.backend;
  pgo.init_method = config.distributed.init_method;
  pgo.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.distributed.timeout_seconds * 1000));
  pgo.device = device;
  RunLog log(world.rank == 0);
  auto collectives = init_process_group(world, pgo);
  log.info("distributed: world size " + std::to_string(world.world_size) + ", " +
           std::to_string(world.local_world_size) + " ranks per node, backend " + backend_name(pgo.backend) +
           ", device " + device.str() + ", init " +
           (pgo.init_method.kind == InitMethod::Kind::kEnv
                ? "env://" + world.master_addr + ":" + std::to_string(world.master_port)
                : setting_text(pgo.init_method)) +
           ", launcher " + launcher_name(world.launcher) +
           (collectives->transport().empty() ? "" : ", " + collectives->transport()));
  // One copy of the data set and the pretrained weights per node: the node's first process makes them
  // (ours already did, before starting the workers), the others read them once it is done.
  Job job;
  const bool first = world.local_rank == 0 && world.launcher != Launcher::kSelf;
  if (first) job = prepare_inputs(config, inputs, /*fetch=*/true, log);
  collectives->barrier();
  if (!first) job = prepare_inputs(config, inputs, /*fetch=*/false, log);
  install_stop_handlers();
  const int status = body(job, *collectives, log, device);
  collectives->shutdown();
  return status;
}

}  // namespace

// Runs `body` as this process's share of the job the config and environment describe: a worker under
// an external launcher, one process, or the launcher of this node's workers (which re-run `argv`).
// `inputs`: what the job reads before its body runs.
int run_job(const Config& config, const std::vector<std::string>& argv, const JobBody& body,
            const JobInputs& inputs) {
  const EnvMap env = current_environment();
  const ProcessCount& nproc = config.distributed.nproc_per_node;
  // Under Slurm, one task per node that starts its own workers is asked for with nproc_per_node > 1.
  const bool slurm_tasks_are_nodes = !nproc.automatic && nproc.count > 1;
  if (auto world = worker_from_env(env, slurm_tasks_are_nodes))
    return run_worker(config, *world, env, inputs, body);

  const int nproc_here = workers_per_node(config);
  const NodePlan plan = node_plan_from_env(env, slurm_tasks_are_nodes);
  RunLog log(true);
  const bool one_process = nproc_here == 1 && plan.nnodes == 1;  // no process group at all
  // Where the process(es) run, checked before anything is generated or fetched (one error line).
  WorldInfo workers;
  workers.launcher = Launcher::kSelf;
  workers.local_world_size = nproc_here;
  workers.world_size = nproc_here * plan.nnodes;
  const torch::Device device = one_process ? place_process(config, WorldInfo{}, env).device
                                           : choose_placement(config, workers, env).device;
  const Job job = prepare_inputs(config, inputs, /*fetch=*/true, log);
  if (one_process) {
    install_stop_handlers();
    auto collectives = make_local_collectives();
    return body(job, *collectives, log, device);
  }
  // Launcher of this node's workers, which read the data and the weights prepared here: the index is
  // checked once here (one error line, not one per worker).
  if (inputs.dataset) load_train_index(config.data, index_options(config.data));
  LaunchOptions lo;
  lo.args = argv;
  lo.nproc = nproc_here;
  lo.node = plan;
  lo.grace_seconds = config.distributed.grace_seconds;
  lo.host_store = config.distributed.init_method.kind == InitMethod::Kind::kEnv;
  log.info("launching " + std::to_string(nproc_here) + " workers on node " + std::to_string(plan.node_rank) +
           " of " + std::to_string(plan.nnodes) + " (" + plan.source + ")");
  return launch_workers(lo);
}

Config job_config(const std::string& path, std::vector<std::string> sets, const std::string& nproc_per_node) {
  if (!nproc_per_node.empty()) sets.push_back("distributed.nproc_per_node=" + nproc_per_node);
  Config config = load_config(path, sets);
  apply_job_settings(config);
  return config;
}

}  // namespace ranzcr
