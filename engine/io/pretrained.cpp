#include "engine/io/pretrained.h"

#include <torch/torch.h>

#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "engine/io/weight_file.h"
#include "engine/runtime/precision.h"

namespace ranzcr {
namespace {

/// The weight file `path`, read once; read errors as one line starting "model.pretrained: ".
WeightFile read_pretrained(const std::string& path) {
  try {
    return read_weights(path);
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL("model.pretrained: ", e.what());
  }
}

/// "" or a warning: the file is an exported model whose metadata says it normalised its input otherwise
/// than model.input_mean/input_std.
std::string normalisation_warning(const std::map<std::string, std::string>& meta, const ModelConfig& model) {
  auto mean = meta.find("mean"), std = meta.find("std");
  if (mean == meta.end() || std == meta.end()) return "";
  const std::string ours_mean = nlohmann::json(model.input_mean).dump();
  const std::string ours_std = nlohmann::json(model.input_std).dump();
  if (nlohmann::json::parse(mean->second, nullptr, false) == nlohmann::json::parse(ours_mean) &&
      nlohmann::json::parse(std->second, nullptr, false) == nlohmann::json::parse(ours_std))
    return "";
  return setting_text(model.pretrained) + " was trained with input mean " + mean->second + " std " +
         std->second + "; this run normalises with model.input_mean " + ours_mean + " model.input_std " +
         ours_std;
}

}  // namespace

ModelSpec model_spec(const ModelConfig& model, int64_t num_classes) {
  ModelSpec spec;
  spec.in_channels = model.in_channels;
  spec.num_classes = static_cast<int>(num_classes);
  spec.dropout = model.dropout;
  return spec;
}

StartingModel starting_model(const Config& config, const ResolvedWeights& weights, int64_t num_classes,
                             const torch::Device& device, bool channels_last) {
  StartingModel out;
  const ModelSpec spec = model_spec(config.model, num_classes);
  if (weights.file.empty()) {
    out.model = make_model(config.model.name, spec);
  } else {
    WeightFile file = read_pretrained(weights.file);
    const StartingWeights start{weights.file, std::move(file.tensors)};
    PretrainedReport report;
    out.model = make_model(config.model.name, spec, &start, &report);
    out.loaded = report.summary(weights.file);
    out.warning = normalisation_warning(file.metadata, config.model);
  }
  out.model->to(device);
  set_memory_format(*out.model, channels_last);
  return out;
}

PretrainedReport load_pretrained(torch::nn::Module& model, const std::string& path) {
  WeightFile file = read_pretrained(path);
  return load_weights(model, StartingWeights{path, std::move(file.tensors)});
}

}  // namespace ranzcr
