// The training loop: data split, model, optimizer, warmup + cosine schedule, validation, metrics.jsonl,
// atomic last/best checkpoints, resume. Rank-aware through Collectives: only the main rank writes files.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "data/dataset_index.h"
#include "data/split.h"
#include "distributed/collectives.h"
#include "engine/config.h"
#include "engine/inference.h"
#include "engine/run_log.h"

namespace ranzcr {

struct TrainOptions {
  std::string resume_path;  // checkpoint to resume from ("" = fresh run)
  torch::Device device = torch::kCPU;
  /// Set (to a signal number) by a signal handler: save last.pt at the next step and stop. The decision
  /// is all-reduced every step, so every rank stops at the same step.
  const std::atomic<int>* stop_signal = nullptr;
};

struct TrainSummary {
  double best_auc = -1.0;
  double last_auc = -1.0;
  int64_t epochs = 0;
  int stopped_by_signal = 0;   // non-zero: stopped early after saving last.pt
  bool early_stopped = false;  // train.early_stop_patience reached
};

/// Learning rate at optimizer step `step` (0-based): linear warmup to `lr` over `warmup_steps`, then
/// cosine decay to lr * min_ratio at `total_steps`.
double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio);

/// Inference settings (size, CLAHE, batch, loader, channels) from the config, for validation,
/// evaluate and predict alike; `tta` adds hflip averaging on top of train.tta_hflip.
InferenceOptions inference_options(const Config& config, torch::Device device, bool tta = false);

/// The train/validation split the config asks for: GroupKFold fold when data.folds > 0, else a
/// val_fraction holdout; grouped by the index's groups, seeded by `seed`.
Split validation_split(const Config& config, const DatasetIndex& index);

/// Trains per `config` (already validated). Throws std::runtime_error on user errors.
TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options);

}  // namespace ranzcr
