// Model knowledge about pretrained weights: timm's names (torchvision's EfficientNet names translated), the
// first conv adapted to the input channels as timm does, the classifier left fresh when its shape differs.
#include "models/pretrained.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string_view>

#include "core/check.h"
#include "core/digits.h"
#include "core/text.h"

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

NamedTensors timm_names_from_torchvision(NamedTensors tensors) {
  bool stem = false, block = false;
  for (const auto& kv : tensors) {
    stem = stem || kv.first == "features.0.0.weight";
    block = block || kv.first.find(".block.") != std::string::npos;
  }
  if (!stem || !block) return tensors;

  // Split "features.S.rest" keys; the last S is the head conv. Within a block "features.S.I.block.J.rest",
  // the squeeze-excitation's J tells the layout: 1 for [depthwise, se, project] (timm's DepthwiseSeparable),
  // 2 for [expand, depthwise, se, project] (timm's InvertedResidual).
  auto split = [](const std::string& key,
                  size_t from) {  // (the number at `from` or -1, where the next part starts)
    const size_t dot = std::min(key.find('.', from), key.size());
    const int n = parse_digits(std::string_view(key).substr(from, dot - from), 5).value_or(-1);
    return std::make_pair(n, std::min(dot + 1, key.size()));
  };
  int last_stage = 0;
  std::map<std::string, int> se_index;  // "S.I" -> J of the squeeze-excitation
  for (const auto& kv : tensors) {
    const std::string& k = kv.first;
    if (k.rfind("features.", 0) != 0) continue;
    auto [s, after_s] = split(k, 9);
    last_stage = std::max(last_stage, s);
    const size_t b = k.find(".block.", after_s - 1);
    if (b != std::string::npos && k.find(".fc1.", b) != std::string::npos) {
      auto [j, after_j] = split(k, b + 7);
      se_index[k.substr(9, b - 9)] = j;
    }
  }
  auto norm_act = [](const std::string& rest, const std::string& conv, const std::string& bn) {
    // Conv2dNormActivation: "0.weight" -> conv, "1.x" -> bn
    return rest.rfind("0.", 0) == 0 ? conv + "." + rest.substr(2) : bn + "." + rest.substr(2);
  };
  for (auto& kv : tensors) {
    std::string& k = kv.first;
    if (k.rfind("classifier.1.", 0) == 0) {
      k = "classifier." + k.substr(13);
      continue;
    }
    if (k.rfind("features.", 0) != 0) continue;
    auto [s, after_s] = split(k, 9);
    if (s < 0) continue;
    const std::string rest = k.substr(after_s);
    if (s == 0) {
      k = norm_act(rest, "conv_stem", "bn1");
      continue;
    }
    if (s == last_stage) {
      k = norm_act(rest, "conv_head", "bn2");
      continue;
    }
    // rest = "I.block.J.tail"
    auto [i, after_i] = split(k, after_s);
    const size_t b = k.find(".block.", after_i - 1);
    if (b == std::string::npos) continue;
    auto [j, after_j] = split(k, b + 7);
    if (i < 0 || j < 0) continue;
    const std::string tail = k.substr(after_j);
    const int se = se_index.count(k.substr(9, b - 9)) ? se_index[k.substr(9, b - 9)] : 2;
    const std::string prefix = "blocks." + std::to_string(s - 1) + "." + std::to_string(i) + ".";
    std::string name;
    if (j == se) {
      name = tail.rfind("fc1.", 0) == 0 ? "se.conv_reduce." + tail.substr(4)
                                        : "se.conv_expand." + tail.substr(4);
    } else if (se == 1) {  // depthwise, se, project
      name = j == 0 ? norm_act(tail, "conv_dw", "bn1") : norm_act(tail, "conv_pw", "bn2");
    } else {  // expand, depthwise, se, project
      name = j == 0   ? norm_act(tail, "conv_pw", "bn1")
             : j == 1 ? norm_act(tail, "conv_dw", "bn2")
                      : norm_act(tail, "conv_pwl", "bn3");
    }
    k = prefix + name;
  }
  return tensors;
}

PretrainedReport load_weights(torch::nn::Module& model, const StartingWeights& weights) {
  std::map<std::string, torch::Tensor> source;
  for (auto& kv : timm_names_from_torchvision(weights.tensors)) source[kv.first] = kv.second;
  const std::string& path = weights.path;
  Matching m = match(model_tensors(model), std::move(source), path);
  RANZCR_CHECK(m.missing.empty() && m.unexpected.empty() && m.mismatched.empty(), "model.pretrained: ", path,
               " does not fit the model (timm names expected)", key_list("missing", m.missing),
               key_list("unexpected", m.unexpected), key_list("other shape", m.mismatched));
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : m.copies) dst.copy_(src.to(dst.scalar_type()));
  m.report.loaded = static_cast<int64_t>(m.copies.size());
  return m.report;
}

std::shared_ptr<Classifier> make_model(const std::string& name, const ModelSpec& spec,
                                       const StartingWeights* weights, PretrainedReport* report) {
  std::shared_ptr<Classifier> model = create_model(name, spec);
  if (weights) {
    const PretrainedReport r = load_weights(*model, *weights);
    if (report) *report = r;
  }
  return model;
}

}  // namespace ranzcr
