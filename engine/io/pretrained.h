// model.pretrained: timm- or torchvision-named weights (.safetensors or torch.save'd .pth/.bin) loaded into a
// zoo model by name, from the file pretrained_source.h resolved the setting to.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "models/registry.h"

namespace ranzcr {

/// What load_pretrained did, for the log.
struct PretrainedReport {
  int64_t loaded = 0;                      // tensors copied into the model
  std::string adapted_input_conv;          // "conv1.weight: 3 -> 1 channels" when the first conv was adapted
  std::vector<std::string> reinitialised;  // classifier tensors left as initialised (their shape differs)
  /// One line: "N tensors from PATH; ...".
  std::string summary(const std::string& path) const;
};

/// Copies the tensors of the weight file `path` (read_weight_file: .safetensors or a torch.save'd state dict
/// or checkpoint; timm's names, or torchvision's EfficientNet names translated by
/// timm_names_from_torchvision; any float dtype; "module."/"_orig_mod." prefixes dropped) into `model`'s
/// parameters and buffers of the same names:
/// - the first conv (the model's first 4-D parameter) is adapted to the model's input channels as timm's
///   adapt_input_conv does: RGB summed for one channel, repeated and scaled by 3/C for C channels;
/// - the classifier (the module of the model's last 2-D parameter) keeps its fresh initialisation when
///   its shape differs (another number of classes);
/// - BatchNorm's num_batches_tracked may be absent.
/// Anything else missing, unexpected or of another shape throws one std::runtime_error listing all of it,
/// before the model is changed. A file read_weight_file cannot read throws its one-line error.
PretrainedReport load_pretrained(torch::nn::Module& model, const std::string& path);

/// The config's model with `num_classes` outputs on `device`, in NHWC when `channels_last`, with the
/// weights of model.pretrained when set (see load_pretrained); `pretrained_log` gets what was loaded.
std::shared_ptr<Classifier> make_model(const Config& config, int64_t num_classes, const torch::Device& device,
                                       bool channels_last, std::string* pretrained_log = nullptr);

/// "" or a warning: model.pretrained is an exported file whose run normalised its input otherwise than
/// model.input_mean/input_std.
std::string pretrained_normalisation_warning(const ModelConfig& model);

}  // namespace ranzcr
