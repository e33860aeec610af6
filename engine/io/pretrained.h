// The model a job starts from: the config's zoo model (models/pretrained.h) with the weights the job
// resolved model.pretrained to (pretrained_source.h), their file read once here.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "engine/config/config.h"
#include "engine/io/pretrained_source.h"
#include "models/pretrained.h"

namespace ranzcr {

/// The config's model settings for `num_classes` outputs.
ModelSpec model_spec(const ModelConfig& model, int64_t num_classes);

/// The model a job starts from, and what the log says of its weights.
struct StartingModel {
  std::shared_ptr<Classifier> model;
  std::string loaded;   // "N tensors from PATH; ..." when weights were loaded, else ""
  std::string warning;  // "" or: the file is an exported model whose run normalised its input otherwise
};

/// The config's model with `num_classes` outputs on `device`, in NHWC when `channels_last`, started from
/// `weights.file` when there is one: read once (read_weights: .safetensors or a torch.save'd state dict or
/// checkpoint, "module."/"_orig_mod." prefixes dropped), loaded by models' load_weights, and its
/// safetensors metadata compared with model.input_mean/input_std. A file that cannot be read or does not
/// fit throws one line starting "model.pretrained: ".
StartingModel starting_model(const Config& config, const ResolvedWeights& weights, int64_t num_classes,
                             const torch::Device& device, bool channels_last);

/// The weight file `path` loaded into `model` (read_weights, then load_weights), with the same errors.
PretrainedReport load_pretrained(torch::nn::Module& model, const std::string& path);

}  // namespace ranzcr
