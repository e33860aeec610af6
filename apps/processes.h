// The processes of a job (train, cv, bench, evaluate, predict): this process's share of what the config and
// the environment describe: one process, a worker under a launcher (ours, torchrun, srun, a PyTorchJob),
// or the launcher of this node's workers, which re-run the same command line. Each settles on the device
// and backend engine/runtime/placement.h chooses, and the job's inputs (the data set, generated when it is
// the synthetic one, and the pretrained weights) are made ready once per node before the body runs.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "distributed/collectives.h"
#include "distributed/world.h"
#include "engine/config/config.h"
#include "engine/io/pretrained_source.h"
#include "engine/report/run_log.h"

namespace ranzcr {

/// What every process of a job gets: the config as the job runs and records it, and model.pretrained
/// resolved (the file the model starts from). Both are made once, by prepare_inputs: the config then has
/// model.pretrained pinned and the weights' normalisation (pretrained_source.h's config_with).
struct Job {
  Config config;
  ResolvedWeights weights;
};

/// What a job runs on every process, on `device`. Returns the exit status.
using JobBody = std::function<int(const Job&, Collectives&, RunLog&, const torch::Device&)>;

/// What a job reads before its body runs.
struct JobInputs {
  /// The config's training data set (generated first when it is the synthetic one) and the pretrained
  /// weights (model.pretrained resolved once per node).
  bool dataset = true;
  std::string resume;  // train --resume: the checkpoint whose Hub pin the weights keep
};

/// Runs `body` as this process's share of the job: a worker (joins the process group), one process (no
/// process group), or the launcher of this node's workers, which re-run `argv` (the command line after
/// the program name). Installs the stop-signal handlers (stop_signals.h) before `body`.
int run_job(const Config& config, const std::vector<std::string>& argv, const JobBody& body,
            const JobInputs& inputs = {});

/// The config file with `sets` and --nproc-per-node applied, and its process settings in effect
/// (apply_job_settings).
Config job_config(const std::string& path, std::vector<std::string> sets, const std::string& nproc_per_node);

/// A job's process settings: train.num_threads in effect (when set), and the C heap keeps freed memory for
/// the next step (core/heap.h).
void apply_job_settings(const Config& config);

/// The CPUs this process may use (affinity, cgroup quota, Slurm's --cpus-per-task).
int hardware_threads();

/// train.num_threads: 0: this process's share of the cores, `processes` of this node sharing them; unless
/// OMP_NUM_THREADS (in `env`) says how many each takes (as torchrun sets it, and as PyTorch honours it),
/// which LibTorch's default already is.
void share_cores(const Config& config, int processes, const EnvMap& env);

/// Progress of synthetic-data generation: in a terminal one line updated in place, in a log a line per
/// quarter.
void print_progress(int64_t done, int64_t total);

}  // namespace ranzcr
