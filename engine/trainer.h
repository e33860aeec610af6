// The training loop: data split, model, optimizer, warmup + cosine schedule, validation, metrics.jsonl,
// atomic last/best checkpoints, resume. Rank-aware through Collectives: only the main rank writes files.
#pragma once

#include <memory>
#include <string>

#include "distributed/collectives.h"
#include "engine/config.h"
#include "engine/run_log.h"

namespace ranzcr {

struct TrainOptions {
  std::string resume_path;  // checkpoint to resume from ("" = fresh run)
  torch::Device device = torch::kCPU;
};

struct TrainSummary {
  double best_auc = -1.0;
  double last_auc = -1.0;
  int64_t epochs = 0;
};

/// Learning rate at optimizer step `step` (0-based): linear warmup to `lr` over `warmup_steps`, then
/// cosine decay to lr * min_ratio at `total_steps`.
double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio);

/// Trains per `config` (already validated). Throws std::runtime_error on user errors.
TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options);

}  // namespace ranzcr
