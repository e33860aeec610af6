// A trained model for evaluate, predict and export: a ranzcr checkpoint (.pt) or a .safetensors file
// written by `ranzcr export` (timm's parameter names plus the metadata inference needs), told apart by
// their content.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "models/registry.h"

namespace ranzcr {

/// What inference needs to know about the weights, besides the weights.
struct TrainedModelInfo {
  std::string path;
  ModelConfig model;                     // name, in_channels, input_mean, input_std of the training run
  std::vector<std::string> label_names;  // the classifier's outputs, in order
  std::string config_yaml;               // the training run's resolved config
  int64_t epoch = 0;                     // completed epochs when the weights were saved
  bool ema = false;                      // the weights are the exponential moving average (train.ema_decay)
};

struct TrainedModel {
  TrainedModelInfo info;
  std::shared_ptr<Classifier> model;  // the deployable weights (the EMA's when the run kept one), eval mode
};

/// Reads `path` (a checkpoint or an exported .safetensors file) and builds its model on `device`.
/// Throws std::runtime_error, one line naming the file: missing, neither kind of file, a .safetensors file
/// without ranzcr's metadata (plain timm weights belong in model.pretrained), weights that do not fit.
TrainedModel load_trained_model(const std::string& path, const torch::Device& device = torch::kCPU);

/// The metadata `export_safetensors` writes (all strings, as safetensors wants; lists as JSON): format,
/// model_name, label_names, num_classes, in_chans, input_size (JSON [C, H, W], H = W = data.image_size),
/// mean, std (JSON), weights (ema | model), epoch, ranzcr_config (the run's resolved YAML).
std::map<std::string, std::string> export_metadata(const TrainedModelInfo& info);

/// Writes the model's parameters and buffers under timm's names (float32) with export_metadata,
/// atomically. Returns the number of tensors written.
int64_t export_safetensors(const TrainedModel& trained, const std::string& out);

}  // namespace ranzcr
