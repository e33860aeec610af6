// The training features there are (see training_feature.h), each made from the config; null when the config
// does not use it. make_training_features (feature_list.cpp) lists them in the order their hooks run.
#pragma once

#include <functional>
#include <memory>

#include "engine/config/config.h"
#include "engine/train/training_feature.h"

namespace ranzcr {

/// train.ema_decay > 0: an exponential moving average of the weights, validated beside the model (its
/// AUC chooses the best checkpoint) and saved as the checkpoint part "ema" (ema_feature.cpp).
std::unique_ptr<TrainingFeature> make_ema_feature(const Config& config);
/// model.aux_seg_weight > 0: the auxiliary segmentation head, trained on the annotated devices' masks
/// and saved as the part "aux_head"; with 0 it only refuses to resume a run that had one
/// (aux_head_feature.cpp).
std::unique_ptr<TrainingFeature> make_aux_head_feature(const Config& config);
/// output.keep_best_k: the k best epochs kept as numbered checkpoints (run_folder.h); with 0 it removes the
/// ones an earlier run kept (checkpoint_features.cpp).
std::unique_ptr<TrainingFeature> make_top_checkpoints_feature(const Config& config);
/// output.keep_every > 0: a numbered checkpoint (run_folder.h) every N epochs (checkpoint_features.cpp).
std::unique_ptr<TrainingFeature> make_keep_every_feature(const Config& config);
/// Early stopping: counts the epochs without a better metric (saved in checkpoints) and, with
/// train.early_stop_patience > 0, ends the run after that many (early_stop_feature.cpp).
std::unique_ptr<TrainingFeature> make_early_stop_feature(const Config& config);
/// Whether a run whose last checkpoint has `meta` was ended by early stopping under `train`: the same
/// rule, on the count the meta keeps for readers without the features (early_stop_feature.cpp).
bool stopped_early(const TrainConfig& train, const CheckpointMeta& meta);
/// Tests: `callback` runs on every rank right before each epoch's validation (feature_list.cpp).
std::unique_ptr<TrainingFeature> make_before_validation_feature(std::function<void(int64_t)> callback);

}  // namespace ranzcr
