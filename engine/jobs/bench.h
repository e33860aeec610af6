// `ranzcr bench`: the training throughput of a config, in three figures that locate the bottleneck:
// the loader alone, the device alone (one fixed batch), and the real training step fed by the loader.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>

#include "data/batch_loader.h"
#include "distributed/collectives.h"
#include "engine/config/config.h"
#include "engine/io/pretrained_source.h"
#include "engine/jobs/thread_usage.h"
#include "engine/report/run_log.h"

namespace ranzcr {

struct BenchResult;

struct BenchOptions {
  /// Inference instead of training (bench --infer): the eval loader alone, the model alone on a fixed batch
  /// (infer.backend and infer.precision as predict runs them), and predict's path from files to logits.
  bool infer = false;
  std::string onnx_out;  // infer: also write the model's ONNX graph here (for other runtimes' figures)
  int steps = 30;        // timed batches / steps per figure
  int warmup = 5;        // untimed batches / steps before each figure (thread start-up, cuDNN autotuning)
  int loader_steps = 0;  // timed batches of the loader figure; 0: steps
  torch::Device device = torch::kCPU;
  ResolvedWeights weights;  // model.pretrained as the job resolved it: the file the model starts from
  std::string profile_dir;  // set: a profiler trace and kernel table of profile_steps compute steps here
  int profile_steps = 5;
  int profile_warmup = 2;  // compute steps before them with the profiler prepared (as the PyTorch reference)
  // Called on every rank with the three figures once they are measured, before the profile (so that a
  // profile that fails or is cut short costs no figure).
  std::function<void(const BenchResult&)> on_figures;
};

struct BenchResult {
  // Images per second of the whole job (every rank).
  double loader_images_per_sec = 0.0;  // read, decode, augment, collate (the loader's threads alone)
  double compute_images_per_sec =
      0.0;                          // forward + backward + optimizer step on a batch already on the device
  double e2e_images_per_sec = 0.0;  // the training step fed by the loader
  double sync_wait_share = -1.0;    // world size > 1: share of e2e time in the gradient-sync wait
  // Where each timed section's CPU went (this rank's threads), and how the e2e steps found the loader's
  // queue: whether the run is loader-bound.
  SectionUsage loader_cpu, compute_cpu, e2e_cpu;
  LoaderQueueStats e2e_queue;
  std::string mode = "train";  // train | infer
  std::string backend;         // infer: what ran the model ("libtorch", "openvino f32", ...)
  std::string device, model, precision;
  bool channels_last = false;
  // The libraries this process loaded: LibTorch, and on CUDA cuDNN, cuBLAS, NCCL ("" where absent).
  std::string torch_version, cudnn_version, cublas_version, nccl_version;
  std::string profile_dir;    // where --profile wrote trace.json, kernels.json, kernels.md ("" = not asked)
  std::string profile_table;  // its top kernels (the main rank's)
  std::string profile_error;  // the one line of a profile that failed ("" = none); the figures stand
  int in_channels = 1;
  int image_size = 0, batch_size = 0, threads = 0, loader_workers = 0, world_size = 1, steps = 0, warmup = 0,
      loader_steps = 0;
};

/// Measures the three figures for `config` on `options.device` (loader, compute, end to end, in that
/// order), then, when asked, profiles compute steps on the fixed batch with the loader stopped; every rank of
/// `collectives` runs it. A profile that fails is `profile_error`, not an exception.
BenchResult run_bench(const Config& config, Collectives& collectives, const BenchOptions& options);

/// bench --infer: the same three figures for inference (loader: predict's loader alone; compute: the
/// model alone on a fixed batch of train.eval_batch_size; e2e: files to logits, as predict runs), on the
/// config's model with its initial (or model.pretrained) weights. One process; every rank runs its own.
BenchResult run_infer_bench(const Config& config, Collectives& collectives, const BenchOptions& options);

/// The result as JSON text (the `bench --out` file).
std::string bench_json(const BenchResult& result);
/// The figures as a readable table.
std::string bench_table(const BenchResult& result);
/// The profile's part of the report: its top kernels and where the files are, or the one line of its
/// failure; "" when no profile was asked.
std::string bench_profile_report(const BenchResult& result);

}  // namespace ranzcr
