// The Trainer, private to engine/train (others call train(), trainer.h). It owns the run's data split,
// model, optimizer, DDP wrapper and step policy, and calls the training features (training_feature.h) at
// their hooks; it never names one. Set-up in trainer.cpp, the epoch loop in trainer_loop.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset_index.h"
#include "data/sampler.h"
#include "data/split.h"
#include "distributed/ddp.h"
#include "engine/infer/inference.h"
#include "engine/report/tracked_run.h"
#include "engine/train/epoch_progress.h"
#include "engine/train/trainer.h"
#include "engine/train/training_feature.h"

namespace ranzcr {

class Trainer {
 public:
  /// Loads the data index, builds model, features, optimizer and DDP wrapper, and resumes when asked.
  Trainer(Config config, Collectives& collectives, RunLog& log, TrainOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains the remaining epochs. Throws std::runtime_error on user errors, and when the loss turns
  /// NaN/inf (nothing is saved then: the last checkpoint stays the last good one).
  TrainSummary fit();

 private:
  // ---- set-up (trainer.cpp) ----
  void load_data();
  std::shared_ptr<const CachedImages> open_cache();
  void build_model();
  /// The checkpoint to continue from: --resume, else (train.resume: auto) output.dir's last checkpoint when
  /// rank 0 finds one; "" = a fresh run.
  std::string resume_source();
  void resume(const std::string& path, bool automatic);
  void restore_meta(const CheckpointMeta& saved, const std::string& path, bool automatic);
  /// Makes the metrics file hold exactly the epochs done so far (none for a fresh run).
  void start_metrics();
  /// Opens the run's trackers (their runs of the checkpoint when resuming) and adds their writer.
  void start_tracking();
  void build_step();
  void plan_epochs();

  // ---- the loop (trainer_loop.cpp) ----
  TrainSummary fit_epochs();
  /// The trackers' files and status (FINISHED, or KILLED after a stop request).
  void end_tracking();
  std::vector<int64_t> epoch_rows(int64_t epoch);
  /// Seeds this rank's random ops (dropout) for `epoch`, or restores them when resuming mid-epoch.
  void seed_epoch(int64_t epoch);
  /// One epoch of training; nullopt when a stop request ended it early (the last checkpoint saved).
  std::optional<EpochTotals> train_epoch(int64_t epoch);
  /// Forward/backward of batch `i` of `n`, and the optimizer step when it ends an accumulation window.
  /// True when an optimizer step was taken.
  bool train_batch(const DeviceBatch& batch, int64_t i, int64_t n, Progress& progress);
  /// After an optimizer step: true when a stop request ends the run here. Throws on a diverged loss.
  bool after_step(int64_t epoch, bool epoch_end);
  std::string divergence_message(int64_t epoch) const;
  void stop_mid_epoch(int64_t epoch, int64_t batches_done, int64_t epoch_batches);
  /// Validates, records the epoch and saves its checkpoints.
  void finish_epoch(int64_t epoch, const EpochTotals& totals, Clock::time_point start);
  /// Asks every feature whether the run ends here (on every rank); the first reason given.
  std::optional<StopReason> stop_reason();
  /// Validates the model (and what the features validate) into `r`; returns the unreadable images skipped.
  int64_t validate(EpochRecord& r);
  /// Serialized once, written to every path (main rank).
  void save(const std::vector<std::string>& paths);
  /// BatchNorm statistics (and the features' buffers) agree on every rank.
  void sync_buffers();

  Config config_;
  Collectives& collectives_;
  RunLog& log_;
  TrainOptions options_;
  std::string out_dir_, ckpt_dir_;
  TrainingFeatures features_;

  DatasetIndex index_;
  Split split_;
  std::shared_ptr<Classifier> model_;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>
      trained_modules_;                        // beside the model
  std::shared_ptr<torch::nn::Module> synced_;  // what DDP synchronises: the model and those modules
  bool bn_sync_said_ = false;        // the bn_sync: sync line printed (build_step runs again after a resume)
  ExtraLoss* extra_loss_ = nullptr;  // a feature's, or null
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<LossWatch> watch_;
  std::unique_ptr<Poll> poll_;
  MetricsWriters writers_;
  std::unique_ptr<TrackedRun>
      tracked_;  // main rank; a tracker not finished ends FAILED when an exception unwinds
  CheckpointMeta meta_;

  std::unique_ptr<DistributedSampler> sampler_;
  LoaderOptions loader_options_;
  DeviceBatchOptions batch_options_;
  InferenceOptions inference_options_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, warmup_steps_ = 0;
  int64_t skip_batches_ = 0;  // of the next epoch, when resuming a run stopped mid-epoch
  torch::Tensor resume_rng_;  // this rank's generator state for that epoch (mid-epoch resume)
  double lr_ = 0.0;
  TrainSummary summary_;
};

}  // namespace ranzcr
