// A small CNN for tests and CPU quickstarts: five stride-2 stages of conv-BN-ReLU pairs, global pooling.
#include <torch/torch.h>

#include "models/classifier_head.h"
#include "models/registry.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {
namespace {

class TinyCnn : public Classifier {
  static constexpr size_t kStride8Modules = 18;  // three stages of two conv-BN-ReLU: stride 8, 64 channels

 public:
  explicit TinyCnn(const ModelSpec& spec) {
    const std::vector<int64_t> widths = {16, 32, 64, 128, 128};
    int64_t in = spec.in_channels;
    for (int64_t w : widths) {
      for (int64_t stride : {2, 1}) {
        features_->push_back(
            torch::nn::Conv2d(torch::nn::Conv2dOptions(in, w, 3).stride(stride).padding(1).bias(false)));
        features_->push_back(SyncBatchNorm2d(w));
        features_->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(true)));
        in = w;
      }
    }
    register_module("features", features_);
    head_ = ClassifierHead(*this, "fc", in, spec);
  }
  torch::Tensor forward(torch::Tensor x) override { return forward_with_features(x).logits; }
  ClassifierOutput forward_with_features(torch::Tensor x) override {
    ClassifierOutput out;
    size_t i = 0;
    for (auto& m : *features_) {
      x = m.forward(x);
      if (++i == kStride8Modules) out.features = x;
    }
    return head_.finish(std::move(out), x);
  }
  int64_t feature_channels() const override { return 64; }

 private:
  torch::nn::Sequential features_;
  ClassifierHead head_;  // "dropout", "fc"
};

}  // namespace

std::shared_ptr<Classifier> make_tiny_cnn(const ModelSpec& spec) {
  return std::make_shared<TinyCnn>(spec);
}

}  // namespace ranzcr
