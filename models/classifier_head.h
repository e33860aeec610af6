// The tail every classifier of the zoo ends with: global average pooling of the last feature map, dropout
// (ModelSpec::dropout) and a linear layer to the classes.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <string>

#include "models/registry.h"

namespace ranzcr {

/// Not a module of its own: its two layers are registered in the model itself, as "dropout" and the linear
/// layer under the family's own name (timm's "fc" or "classifier"), so that the state-dict keys stay
/// fc.weight / classifier.weight, by which checkpoints and timm weights are read.
class ClassifierHead {
 public:
  ClassifierHead() = default;
  /// Registers the layers in `owner`. The linear layer draws its default initialisation when it is built,
  /// so each model builds its head where its order of construction (its seeded weights) puts it.
  ClassifierHead(torch::nn::Module& owner, const std::string& linear_name, int64_t features,
                 const ModelSpec& spec);

  /// `out` with out.last_features = `last_map` and out.logits = linear(dropout(global average of it)).
  ClassifierOutput finish(ClassifierOutput out, const torch::Tensor& last_map);

  /// The linear layer, for a model that initialises it its own way.
  torch::nn::Linear& linear() { return linear_; }

 private:
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear linear_{nullptr};
};

}  // namespace ranzcr
