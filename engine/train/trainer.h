// Training: train() runs a Trainer (trainer_impl.h, private to this folder) over the config: a short
// fit over epochs of train_epoch, validate and save. What it is made of lives in its own files: the
// optimizer-step policy (train_step.h), the training features (training_feature.h: EMA, auxiliary head, top-k
// checkpoints, early stopping), batches on the device (engine/runtime/device_batches.h), metric writers
// (engine/report/metrics_writer.h), experiment trackers (engine/report/tracked_run.h), checkpoints
// (engine/io/checkpoint.h). Rank-aware through
// Collectives: only the main rank writes files.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>

#include <torch/types.h>

#include "distributed/collectives.h"
#include "engine/config/config.h"
#include "engine/io/checkpoint.h"
#include "engine/io/pretrained_source.h"
#include "engine/report/run_log.h"
#include "tracking/tracker.h"

namespace ranzcr {

struct TrainOptions {
  std::string resume_path;  // checkpoint to resume from ("" = per train.resume: output.dir's last checkpoint
                            // or fresh)
  torch::Device device = torch::kCPU;
  /// model.pretrained as the job resolved it (apps/processes.cpp): the file the model starts from.
  ResolvedWeights weights;
  /// Set (to a signal number) by a signal handler: save the last checkpoint soon and stop. With several ranks
  /// the flags are combined every few optimizer steps and after each epoch's validation and save (see
  /// Trainer), so every rank stops at the same point.
  const std::atomic<int>* stop_signal = nullptr;
  /// Tests: run every training step (next batch, forward, backward, optimizer step) with CUDA's
  /// sync-debug mode set to error, so any host-device synchronisation in it throws. CUDA builds only.
  bool forbid_device_sync = false;
  /// Tests: called on every rank right before each epoch's validation (0-based epoch), e.g. to raise a
  /// stop signal there.
  std::function<void(int64_t epoch)> before_validation;
  /// The run's experiment trackers (made on the main rank, for "train"); empty = none.
  tracking::TrackerFactory trackers;
  /// The trackers' runs of the job above, by tracker name (cv's, for its folds).
  std::map<std::string, std::string> parent_run_ids;
};

struct TrainSummary {
  double best_auc = -1.0;
  double last_auc = -1.0;
  int64_t epochs = 0;
  int stopped_by_signal = 0;      // non-zero: stopped early after saving the last checkpoint
  bool early_stopped = false;     // a feature ended the run (train.early_stop_patience reached)
  std::string stop_reason;        // why, when early_stopped (logged)
  bool already_finished = false;  // train.resume found a run that had trained all its epochs
};

/// Whether a run whose last checkpoint has `meta` has trained all the epochs `train` asks for (or stopped
/// early): resuming it with train.resume auto has nothing to train. From the meta alone; the Trainer asks
/// its features (the same answer for checkpoints it wrote).
bool run_finished(const TrainConfig& train, const CheckpointMeta& meta);

/// A stop request (SIGINT/SIGTERM, in `flag`) on any rank: this rank's signal, SIGTERM when only another
/// rank's was raised, 0 for none. Every rank must call it (a collective).
int stop_requested(Collectives& collectives, const std::atomic<int>* flag);

/// Trains per `config` (already validated). Throws std::runtime_error on user errors, and when the loss
/// turns NaN/inf (nothing is saved then: the last checkpoint stays the last good one).
TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options);

}  // namespace ranzcr
