#include "models/classifier_head.h"

#include <torch/torch.h>

namespace ranzcr {

ClassifierHead::ClassifierHead(torch::nn::Module& owner, const std::string& linear_name, int64_t features,
                               const ModelSpec& spec) {
  dropout_ = owner.register_module("dropout", torch::nn::Dropout(spec.dropout));
  linear_ = owner.register_module(linear_name, torch::nn::Linear(features, spec.num_classes));
}

ClassifierOutput ClassifierHead::finish(ClassifierOutput out, const torch::Tensor& last_map) {
  out.last_features = last_map;
  out.logits = linear_->forward(dropout_->forward(torch::adaptive_avg_pool2d(last_map, {1, 1}).flatten(1)));
  return out;
}

}  // namespace ranzcr
