#include "engine/io/pretrained.h"
#include "core/text.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "engine/io/pretrained_source.h"
#include "engine/io/safetensors.h"
#include "engine/io/weight_file.h"
#include "engine/runtime/precision.h"

namespace ranzcr {
namespace {

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

/// timm's adapt_input_conv: [O, I, kh, kw] weights for `in_chans` input channels.
torch::Tensor adapt_input_conv(int64_t in_chans, torch::Tensor w, const std::string& key) {
  const auto type = w.scalar_type();
  w = w.to(torch::kFloat32);
  const int64_t i = w.size(1);
  if (in_chans == 1) {
    // timm sums RGB; for I = 6, 9, ... it would sum each triple and keep I / 3 channels, which no
    // 1-channel model takes (it used to fail later, in LibTorch's copy, with a multi-line error).
    RANZCR_CHECK(i == 3, key, ": cannot adapt ", i,
                 " input channels to 1 (only 3-channel weights are summed)");
    w = w.sum(1, /*keepdim=*/true);
  } else {
    RANZCR_CHECK(i == 3, key, ": cannot adapt ", i, " input channels to ", in_chans);
    if (in_chans != 3) {
      const int64_t repeat = (in_chans + 2) / 3;
      w = w.repeat({1, repeat, 1, 1}).slice(1, 0, in_chans) * (3.0 / static_cast<double>(in_chans));
    }
  }
  return w.to(type);
}

/// The tensors of the weight file `path` by timm name.
std::map<std::string, torch::Tensor> read_source(const std::string& path) {
  std::map<std::string, torch::Tensor> source;
  try {
    for (auto& kv : timm_names_from_torchvision(read_weight_file(path))) source[kv.first] = kv.second;
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL("model.pretrained: ", e.what());
  }
  return source;
}

/// The model's tensors in registration order; the first 4-D parameter is the input conv, the module of the
/// last 2-D parameter the classifier.
struct ModelTensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::string first_conv;  // its parameter name
  std::string classifier;  // its module's name and a dot ("fc."), or empty
};

ModelTensors model_tensors(torch::nn::Module& model) {
  ModelTensors target;
  for (const auto& kv : model.named_parameters(/*recurse=*/true)) {
    target.tensors.emplace_back(kv.key(), kv.value());
    if (target.first_conv.empty() && kv.value().dim() == 4) target.first_conv = kv.key();
    if (kv.value().dim() == 2) target.classifier = kv.key().substr(0, kv.key().rfind('.') + 1);
  }
  for (const auto& kv : model.named_buffers(/*recurse=*/true))
    target.tensors.emplace_back(kv.key(), kv.value());
  return target;
}

bool differs_only_in_input_channels(const torch::Tensor& src, const torch::Tensor& dst) {
  return src.dim() == 4 && src.size(0) == dst.size(0) && src.size(2) == dst.size(2) &&
         src.size(3) == dst.size(3);
}

/// A tensor of the classifier module itself (not of a submodule of it).
bool in_classifier(const std::string& key, const std::string& classifier) {
  return !classifier.empty() && key.rfind(classifier, 0) == 0 &&
         key.find('.', classifier.size()) == std::string::npos;
}

/// How the file's tensors map onto the model's.
struct Matching {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, source)
  std::vector<std::string> missing, unexpected, mismatched;     // "key [shape]", for the error
  PretrainedReport report;                                      // all but `loaded`
};

Matching match(const ModelTensors& target, std::map<std::string, torch::Tensor> source,
               const std::string& path) {
  Matching m;
  for (const auto& [key, dst] : target.tensors) {
    auto it = source.find(key);
    if (it == source.end()) {
      if (!ends_with(key, "num_batches_tracked")) m.missing.push_back(key + " " + shape_str(dst));
      continue;
    }
    torch::Tensor src = it->second;
    source.erase(it);
    if (src.sizes() != dst.sizes()) {
      const std::string change = key + " " + shape_str(src) + " -> " + shape_str(dst);
      if (key == target.first_conv && differs_only_in_input_channels(src, dst)) {
        src = adapt_input_conv(dst.size(1), src, "model.pretrained: " + path + ": " + key);
        m.report.adapted_input_conv = change;
      } else if (in_classifier(key, target.classifier)) {
        m.report.reinitialised.push_back(change);
        continue;
      } else {
        m.mismatched.push_back(key + " file " + shape_str(src) + " model " + shape_str(dst));
        continue;
      }
    }
    m.copies.emplace_back(dst, src);
  }
  for (const auto& kv : source) m.unexpected.push_back(kv.first + " " + shape_str(kv.second));
  return m;
}

/// "; WHAT (N): key [shape], ..." naming at most eight keys; empty for none.
std::string key_list(const char* what, const std::vector<std::string>& keys) {
  if (keys.empty()) return "";
  std::string s = ranzcr::str("; ", what, " (", keys.size(), "):");
  for (size_t i = 0; i < keys.size() && i < 8; ++i) s += " " + keys[i] + (i + 1 < keys.size() ? "," : "");
  if (keys.size() > 8) s += " ...";
  return s;
}

}  // namespace

std::string PretrainedReport::summary(const std::string& path) const {
  std::string s = std::to_string(loaded) + " tensors from " + path;
  if (!adapted_input_conv.empty()) s += "; first conv adapted (" + adapted_input_conv + ")";
  if (!reinitialised.empty()) {
    s += "; classifier freshly initialised (shape differs:";
    for (const auto& k : reinitialised) s += " " + k;
    s += ")";
  }
  return s;
}

PretrainedReport load_pretrained(torch::nn::Module& model, const std::string& path) {
  std::map<std::string, torch::Tensor> source = read_source(path);  // read errors first
  Matching m = match(model_tensors(model), std::move(source), path);
  RANZCR_CHECK(m.missing.empty() && m.unexpected.empty() && m.mismatched.empty(), "model.pretrained: ", path,
               " does not fit the model (timm names expected)", key_list("missing", m.missing),
               key_list("unexpected", m.unexpected), key_list("other shape", m.mismatched));
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : m.copies) dst.copy_(src.to(dst.scalar_type()));
  m.report.loaded = static_cast<int64_t>(m.copies.size());
  return m.report;
}

std::shared_ptr<Classifier> make_model(const Config& config, int64_t num_classes, const torch::Device& device,
                                       bool channels_last, std::string* pretrained_log) {
  ModelSpec spec;
  spec.in_channels = config.model.in_channels;
  spec.num_classes = static_cast<int>(num_classes);
  spec.dropout = config.model.dropout;
  std::shared_ptr<Classifier> model = create_model(config.model.name, spec);
  if (!config.model.pretrained.empty()) {
    const std::string file = pretrained_file(config.model);
    const PretrainedReport report = load_pretrained(*model, file);
    if (pretrained_log) *pretrained_log = report.summary(file);
  }
  model->to(device);
  set_memory_format(*model, channels_last);
  return model;
}

std::string pretrained_normalisation_warning(const ModelConfig& model) {
  const auto meta = read_safetensors_metadata(pretrained_file(model));
  auto mean = meta.find("mean"), std = meta.find("std");
  if (mean == meta.end() || std == meta.end()) return "";
  const std::string ours_mean = nlohmann::json(model.input_mean).dump();
  const std::string ours_std = nlohmann::json(model.input_std).dump();
  if (nlohmann::json::parse(mean->second, nullptr, false) == nlohmann::json::parse(ours_mean) &&
      nlohmann::json::parse(std->second, nullptr, false) == nlohmann::json::parse(ours_std))
    return "";
  return model.pretrained + " was trained with input mean " + mean->second + " std " + std->second +
         "; this run normalises with model.input_mean " + ours_mean + " model.input_std " + ours_std;
}

}  // namespace ranzcr
