// Training features: what the Trainer runs beside the plain loop (EMA weights, the auxiliary
// segmentation head, top-k checkpoints, early stopping, test seams). Each is a TrainingFeature with a few
// hooks; the Trainer calls every registered feature at each hook and never names one. A new feature is a
// new file with a TrainingFeature and one line in make_training_features (feature_list.cpp).
// Hooks run on every rank, in registration order; a hook that runs a collective must do so on every rank.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_loader.h"
#include "data/dataset_index.h"
#include "distributed/collectives.h"
#include "engine/config/config.h"
#include "engine/io/checkpoint.h"
#include "engine/report/metrics_writer.h"
#include "engine/report/run_log.h"
#include "engine/runtime/device_batches.h"
#include "engine/train/train_step.h"
#include "models/registry.h"

namespace ranzcr {

struct TrainOptions;

/// What a feature sees while the Trainer sets up; valid during TrainingFeature::setup only, except the
/// references to the run's objects (config, collectives, log, model), which live as long as the Trainer.
struct TrainingSetup {
  const Config& config;
  Collectives& collectives;
  RunLog& log;
  torch::Device device;
  bool channels_last = false;  // the run's memory layout (set it on modules a feature builds)
  const DatasetIndex& index;
  std::string checkpoint_dir;  // output.dir/checkpoints
  Classifier& model;           // built, seeded, on the device
  /// Modules trained beside the model, by checkpoint part name: their parameters join the optimizer and
  /// DDP synchronises them; they are saved and restored by the feature (save/restore).
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>& trained_modules;
  LoaderOptions& loader;            // the training loader's options (e.g. masks to load with the images)
  ExtraLoss* extra_loss = nullptr;  // a loss the feature adds to every step (at most one feature)
};

/// A checkpoint a run resumes from, with the wording of its errors.
struct ResumeSource {
  CheckpointReader& reader;
  std::string holds;  // "output.dir runs/x holds a run (its last checkpoint) " or "--resume F: the checkpoint
                      // holds a run "
  std::string fix;    // what the user can do, for errors ("" or ": use another output.dir, ...")
};

/// Scores a model on the validation split (every rank takes part): its loss and AUC.
using ValidateModel = std::function<EpochRecord::Validation(Classifier& model)>;

/// The end of an epoch, after its record is written and before its checkpoints are saved.
struct EpochEnd {
  int64_t epoch = 0;               // 1-based, done
  const CheckpointMeta& meta;      // what the checkpoint will hold
  double metric = 0.0;             // the epoch's selection metric (may be NaN)
  bool improved = false;           // the metric beat the best so far (meta.best_metric is now it)
  std::vector<std::string> paths;  // the main rank saves the checkpoint to each (add files to keep)
};

/// Why a feature ends the run (TrainingFeature::stop_reason).
struct StopReason {
  std::string why;    // logged when it ends the run: "early stop: no better val_auc_mean for 3 epochs"
  std::string raise;  // the setting to raise to train on ("train.early_stop_patience"; "" = none)
};

class TrainingFeature {
 public:
  virtual ~TrainingFeature() = default;

  // ---- set-up, once, in this order ----
  /// After the model is built (and seeded) and before the optimizer: build what the feature needs.
  virtual void setup(TrainingSetup& s) {}
  /// Resuming: restore the feature's state (after the model's weights, before the optimizer's): its
  /// modules (from.reader.restore_part) and plain values (from.reader.int_value, double_value; nullopt in
  /// checkpoints written before the value was saved). Throws std::runtime_error when the checkpoint does
  /// not fit this run.
  virtual void restore(const ResumeSource& from) {}
  /// Before the first epoch, after any resume: `meta` is where the run starts.
  virtual void start(const CheckpointMeta& meta) {}

  // ---- training ----
  /// After each optimizer step; `step` counts the steps taken so far (1-based).
  virtual void on_optimizer_step(int64_t step) {}
  /// Before validation and checkpoint saves: make buffers agree on every rank.
  virtual void sync_buffers(Collectives& collectives) {}

  // ---- end of an epoch ----
  /// Right before the epoch's validation (0-based epoch).
  virtual void before_validation(int64_t epoch) {}
  /// Adds to the epoch's record: validations of further weights, training figures.
  virtual void on_validate(const ValidateModel& validate, EpochRecord& record) {}
  /// Counts the epoch; adds checkpoint files to keep.
  virtual void on_epoch_end(EpochEnd& end) {}
  /// After the main rank saved the epoch's checkpoints (main rank only).
  virtual void after_save() {}
  /// Whether the run ends here, and why: asked after each epoch's save when epochs are left, and before
  /// the first epoch (after any resume: a run that had ended has nothing to train). Every rank is asked
  /// at the same points and must give the same answer (keep the state it decides on equal on every
  /// rank, e.g. broadcast from rank 0 in on_epoch_end).
  virtual std::optional<StopReason> stop_reason() { return std::nullopt; }

  // ---- checkpoints (main rank, at every save: epoch ends and stops mid-epoch) ----
  /// Its modules (sub-archives by name).
  virtual void save(CheckpointParts& parts) {}
  /// Its plain values, by name (see CheckpointValues), restored in restore(). `meta` is what the same
  /// checkpoint holds: a feature sets the meta fields it owns, kept for readers of the meta alone
  /// (early stopping's epochs_since_best).
  virtual void save_values(CheckpointValues& values, CheckpointMeta& meta) {}
};

using TrainingFeatures = std::vector<std::unique_ptr<TrainingFeature>>;

/// The features a run of `config` uses, in the order their hooks run: the registry of features.
TrainingFeatures make_training_features(const Config& config, const TrainOptions& options);

}  // namespace ranzcr
