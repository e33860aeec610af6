// A zoo model built by name and started from pretrained weights: timm's names (torchvision's EfficientNet
// names translated), the first conv adapted to the input channels, a classifier of another shape left as
// initialised. The weights arrive as tensors; reading the file is engine/io's (pretrained.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/registry.h"

namespace ranzcr {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// Weights to start a model from, and the file they came from (for messages).
struct StartingWeights {
  std::string path;
  NamedTensors tensors;
};

/// What load_weights did, for the log.
struct PretrainedReport {
  int64_t loaded = 0;                      // tensors copied into the model
  std::string adapted_input_conv;          // "conv1.weight: 3 -> 1 channels" when the first conv was adapted
  std::vector<std::string> reinitialised;  // classifier tensors left as initialised (their shape differs)
  /// One line: "N tensors from PATH; ...".
  std::string summary(const std::string& path) const;
};

/// torchvision's EfficientNet names (features.0.0.weight, features.1.0.block.0.0.weight,
/// features.2.0.block.2.fc1.weight, ..., features.8.1.running_var, classifier.1.weight) translated to timm's
/// (conv_stem.weight, blocks.0.0.conv_dw.weight, blocks.1.0.se.conv_reduce.weight, ..., bn2.running_var,
/// classifier.weight) when `tensors` are torchvision-named (a key "features.0.0.weight" and a key holding
/// ".block."); any other naming is returned unchanged. torchvision's ResNets already use timm's names.
NamedTensors timm_names_from_torchvision(NamedTensors tensors);

/// Copies `weights` (timm's names, or torchvision's EfficientNet names translated by
/// timm_names_from_torchvision; any float dtype) into `model`'s parameters and buffers of the same names:
/// - the first conv (the model's first 4-D parameter) is adapted to the model's input channels as timm's
///   adapt_input_conv does: RGB summed for one channel, repeated and scaled by 3/C for C channels;
/// - the classifier (the module of the model's last 2-D parameter) keeps its fresh initialisation when
///   its shape differs (another number of classes);
/// - BatchNorm's num_batches_tracked may be absent.
/// Anything else missing, unexpected or of another shape throws one std::runtime_error listing all of it,
/// before the model is changed.
PretrainedReport load_weights(torch::nn::Module& model, const StartingWeights& weights);

/// The zoo model `name` for `spec` (create_model), on the CPU, started from `weights` when given
/// (load_weights; `report` gets what was loaded).
std::shared_ptr<Classifier> make_model(const std::string& name, const ModelSpec& spec,
                                       const StartingWeights* weights = nullptr,
                                       PretrainedReport* report = nullptr);

}  // namespace ranzcr
