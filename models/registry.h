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

/// Base of every classifier in the zoo.
class Classifier : public torch::nn::Module {
 public:
  /// [N, in_channels, H, W] float32 -> [N, num_classes] logits.
  virtual torch::Tensor forward(torch::Tensor x) = 0;
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
