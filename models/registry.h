// Model zoo behind a name -> factory registry. Every model maps [N, in_channels, H, W] float32 images
// to [N, num_classes] logits.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ranzcr {

struct ModelSpec {
  int in_channels = 1;
  int num_classes = 11;
  double dropout = 0.0;  // dropout rate before the classifier
};

/// The logits and two feature maps of one forward: a mid-level one (for training-only auxiliary heads)
/// and the last one (for class activation maps).
struct ClassifierOutput {
  torch::Tensor logits;         // [N, num_classes]
  torch::Tensor features;       // [N, feature_channels(), H / 8, W / 8]: the first stage at stride 8
  torch::Tensor last_features;  // [N, C, h, w]: the map the head pools into the logits (last conv stage)
};

/// Base of every classifier in the zoo.
class Classifier : public torch::nn::Module {
 public:
  /// [N, in_channels, H, W] float32 -> [N, num_classes] logits.
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  /// The same logits as forward(), the stride-8 feature map and the last map they were computed from.
  /// The default throws std::runtime_error: the model has no such maps.
  virtual ClassifierOutput forward_with_features(torch::Tensor x);
  /// Channels of forward_with_features' map; the default throws like it.
  virtual int64_t feature_channels() const;
};

using ModelFactory = std::function<std::shared_ptr<Classifier>(const ModelSpec&)>;

/// Builds the model registered as `name`; an unknown name throws, listing the valid names.
std::shared_ptr<Classifier> create_model(const std::string& name, const ModelSpec& spec);

/// Registered names, sorted.
std::vector<std::string> model_names();

/// Number of trainable parameters.
int64_t count_parameters(const torch::nn::Module& module);

// Factories, one family per file.
std::shared_ptr<Classifier> make_resnet(const std::string& name, const ModelSpec& spec);
std::shared_ptr<Classifier> make_efficientnet(const std::string& name, const ModelSpec& spec);
std::shared_ptr<Classifier> make_tiny_cnn(const ModelSpec& spec);

}  // namespace ranzcr
