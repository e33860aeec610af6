// Training: a short Trainer::fit over train_epoch, validate and save. The pieces it is made of live in
// their own files: the optimizer-step policy (engine/train_step.h), batches on the device
// (engine/device_batches.h), metric writers (engine/metrics_writer.h), checkpoints. Rank-aware through
// Collectives: only the main rank writes files.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/batch_loader.h"
#include "data/dataset_index.h"
#include "data/sampler.h"
#include "data/split.h"
#include "distributed/collectives.h"
#include "distributed/ddp.h"
#include "engine/io/checkpoint.h"
#include "engine/config/config.h"
#include "engine/runtime/device_batches.h"
#include "engine/train/ema.h"
#include "engine/infer/inference.h"
#include "engine/report/metrics_writer.h"
#include "engine/report/run_log.h"
#include "engine/train/top_checkpoints.h"
#include "engine/train/train_step.h"

namespace ranzcr {

struct TrainOptions {
  std::string
      resume_path;  // checkpoint to resume from ("" = per train.resume: output.dir's last.pt or fresh)
  torch::Device device = torch::kCPU;
  /// Set (to a signal number) by a signal handler: save last.pt soon and stop. With several ranks the
  /// flags are combined every few optimizer steps and after each epoch's validation and save (see
  /// Trainer), so every rank stops at the same point.
  const std::atomic<int>* stop_signal = nullptr;
  /// Tests: run every training step (next batch, forward, backward, optimizer step) with CUDA's
  /// sync-debug mode set to error, so any host-device synchronisation in it throws. CUDA builds only.
  bool forbid_device_sync = false;
  /// Tests: called on every rank right before each epoch's validation (0-based epoch), e.g. to raise a
  /// stop signal there.
  std::function<void(int64_t epoch)> before_validation;
};

struct TrainSummary {
  double best_auc = -1.0;
  double last_auc = -1.0;
  int64_t epochs = 0;
  int stopped_by_signal = 0;      // non-zero: stopped early after saving last.pt
  bool early_stopped = false;     // train.early_stop_patience reached
  bool already_finished = false;  // train.resume found a run that had trained all its epochs
};

/// Learning rate at optimizer step `step` (0-based): linear warmup to `lr` over `warmup_steps`, then
/// cosine decay to lr * min_ratio at `total_steps`.
double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio);

/// Inference settings (size, CLAHE, batch, loader, channels, precision, layout) from the config, for
/// validation, evaluate and predict alike; `tta` adds hflip averaging on top of train.tta_hflip.
InferenceOptions inference_options(const Config& config, torch::Device device, bool tta = false);

/// The train/validation split the config asks for: GroupKFold fold when data.folds > 0, else a
/// val_fraction holdout; grouped by the index's groups, seeded by `seed`.
Split validation_split(const Config& config, const DatasetIndex& index);

/// Whether a run whose last checkpoint has `meta` has trained all the epochs `train` asks for (or stopped
/// early): resuming it with train.resume auto has nothing to train.
bool run_finished(const TrainConfig& train, const CheckpointMeta& meta);

/// The config's model with `num_classes` outputs on `device`, in NHWC when `channels_last`, with the
/// weights of model.pretrained when set (see load_pretrained); `pretrained_log` gets what was loaded.
std::shared_ptr<Classifier> make_model(const Config& config, int64_t num_classes, const torch::Device& device,
                                       bool channels_last, std::string* pretrained_log = nullptr);
/// AdamW or SGD (Nesterov) over `model`'s parameters, per optim.*.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, Classifier& model);
/// The same over `parameters`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        std::vector<torch::Tensor> parameters);
/// The annotations file of the data config: data.root/data.annotations_csv.
std::string annotations_csv_path(const DataConfig& data);
/// The step policy the config asks for on `device` (precision resolved).
StepOptions step_options(const Config& config, const torch::Device& device);
/// The training loader's options (batch, threads, prefetch, bad images, transfer format for `device`).
LoaderOptions train_loader_options(const Config& config, const torch::Device& device, bool drop_last);
/// The DDP wrapper's options (bucket size, BatchNorm statistics policy).
DdpOptions ddp_options(const Config& config);
/// The training augmentation of the config.
TransformOptions train_transform(const Config& config);
/// Process-wide settings for fast kernels on `device` (cuDNN benchmark mode on CUDA).
void configure_device(const torch::Device& device);

class Trainer {
 public:
  /// Loads the data index, builds model, optimizer and DDP wrapper, and resumes when asked.
  Trainer(Config config, Collectives& collectives, RunLog& log, TrainOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains the remaining epochs. Throws std::runtime_error on user errors, and when the loss turns
  /// NaN/inf (nothing is saved then: the last checkpoint stays the last good one).
  TrainSummary fit();

 private:
  struct EpochTotals {  // summed over ranks
    double loss_sum = 0.0, images = 0.0, skipped = 0.0, seconds = 0.0;
    double aux_loss_sum = 0.0, aux_images = 0.0;  // mask BCE over annotated images (model.aux_seg_weight)
  };
  class Progress;
  class LossWatch;
  class Poll;

  void load_data();
  /// model.aux_seg_weight > 0: the device annotations, for the loader's masks.
  void load_annotations();
  void build_model();
  /// model.aux_seg_weight > 0: the auxiliary head on the model's stride-8 map.
  void build_aux_head();
  void build_step();
  /// The checkpoint to continue from: --resume, else (train.resume: auto) output.dir's last.pt when
  /// rank 0 finds one; "" = a fresh run.
  std::string resume_source();
  void resume(const std::string& path, bool automatic);
  /// Makes metrics.jsonl hold exactly the epochs done so far (none for a fresh run); takes over the
  /// top-k checkpoints kept so far.
  void start_metrics();
  void plan_epochs();
  std::vector<int64_t> epoch_rows(int64_t epoch);
  /// Seeds this rank's random ops (dropout) for `epoch`, or restores them when resuming mid-epoch.
  void seed_epoch(int64_t epoch);
  /// One epoch of training; nullopt when a stop request ended it early (last.pt saved).
  std::optional<EpochTotals> train_epoch(int64_t epoch);
  /// Forward/backward of batch `i` of `n`, and the optimizer step when it ends an accumulation window.
  /// True when an optimizer step was taken.
  bool train_batch(const DeviceBatch& batch, int64_t i, int64_t n, Progress& progress);
  /// After an optimizer step: true when a stop request ends the run here. Throws on a diverged loss.
  bool after_step(int64_t epoch, bool epoch_end);
  std::string divergence_message(int64_t epoch) const;
  void stop_mid_epoch(int64_t epoch, int64_t batches_done, int64_t epoch_batches);
  /// Validates, records the epoch and saves its checkpoints; true when early stopping ends the run.
  /// train.early_stop_patience epochs passed without a better metric.
  bool early_stop_due() const;
  bool finish_epoch(int64_t epoch, const EpochTotals& totals, std::chrono::steady_clock::time_point start);
  /// Validates the model (and the EMA weights) into `r`; returns the unreadable images skipped.
  int64_t validate(EpochRecord& r);
  std::vector<std::string> checkpoint_paths(bool improved) const;
  void save(const std::vector<std::string>& paths);
  void sync_buffers();

  Config config_;
  Collectives& collectives_;
  RunLog& log_;
  TrainOptions options_;
  std::string out_dir_, ckpt_dir_;

  DatasetIndex index_;
  Split split_;
  std::shared_ptr<Classifier> model_;
  std::shared_ptr<const ImageAnnotations> annotations_;  // model.aux_seg_weight > 0
  AuxSegHead aux_head_{nullptr};                         // model.aux_seg_weight > 0 (training only)
  std::shared_ptr<torch::nn::Module> synced_;            // what DDP synchronises: model (+ aux head)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<TrainStep> step_;
  std::shared_ptr<Classifier> ema_model_;  // train.ema_decay > 0: the averaged weights
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<TopCheckpoints> top_;  // output.keep_best_k
  std::unique_ptr<LossWatch> watch_;
  std::unique_ptr<Poll> poll_;
  MetricsWriters writers_;
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

/// Trains per `config` (already validated): Trainer(...).fit().
TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options);

}  // namespace ranzcr
