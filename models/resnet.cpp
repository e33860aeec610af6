// ResNet (He et al. 2016) and ResNet-D (He et al. 2019, "Bag of Tricks"; timm's resnet*d: deep 3-conv
// stem of width 32, average-pool downsampling in the shortcut), in timm's layout: parameter and buffer
// names and shapes equal timm's resnet.py (conv1/bn1 or conv1.0/.1/.3/.4/.6 + bn1, layerN.B.convK/bnK,
// downsample.0/.1 or, with average pooling, downsample.1/.2, fc), so timm weights load by name
// (tests/models/timm_keys/). Modules are registered in the order of the earlier torchvision-named
// layout, which fixes the order of the seeded initialisation (same seed, same weights as before).
#include <torch/torch.h>

#include <stdexcept>

#include "core/digits.h"
#include "models/classifier_head.h"
#include "models/registry.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

class Block : public nn::Module {
 public:
  Block(int64_t in, int64_t planes, int64_t stride, bool bottleneck, bool avg_down)
      : bottleneck_(bottleneck) {
    const int64_t out = planes * (bottleneck ? 4 : 1);
    if (bottleneck) {
      conv1_ = register_module("conv1", conv(in, planes, 1));
      conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
      conv3_ = register_module("conv3", conv(planes, out, 1));
      bn3_ = register_module("bn3", SyncBatchNorm2d(out));
    } else {
      conv1_ = register_module("conv1", conv(in, planes, 3, stride));
      conv2_ = register_module("conv2", conv(planes, planes, 3));
    }
    bn1_ = register_module("bn1", SyncBatchNorm2d(planes));
    bn2_ = register_module("bn2", SyncBatchNorm2d(planes));
    if (stride != 1 || in != out) {
      if (avg_down) {  // timm: downsample.0 is the pool, an identity at stride 1, so the conv is .1
        if (stride != 1)
          downsample_->push_back(
              nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(stride).ceil_mode(true).count_include_pad(false)));
        else
          downsample_->push_back(nn::Identity());
      }
      downsample_->push_back(conv(in, out, 1, avg_down ? 1 : stride));
      downsample_->push_back(SyncBatchNorm2d(out));
      register_module("downsample", downsample_);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    // The ReLUs run in place, as torchvision's and timm's do: neither a batch norm's backward nor an add's
    // needs its output, so no buffer is allocated and written for each (the block's input x is not touched).
    torch::Tensor y = bn1_->forward(conv1_->forward(x)).relu_();
    y = bn2_->forward(conv2_->forward(y));
    if (bottleneck_) y = bn3_->forward(conv3_->forward(y.relu_()));
    const torch::Tensor shortcut = downsample_->is_empty() ? x : downsample_->forward(x);
    return (y + shortcut).relu_();
  }

 private:
  bool bottleneck_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  SyncBatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_;
};

class ResNet : public Classifier {
 public:
  ResNet(const std::vector<int64_t>& layers, bool bottleneck, bool variant_d, const ModelSpec& spec) {
    if (variant_d) {  // deep stem: 3x3/2 (32) -> 3x3 (32) -> 3x3 (64), timm's conv1.0 ... conv1.6
      deep_stem_ = nn::Sequential();  // one push_back per statement: the construction order seeds the init
      deep_stem_->push_back(conv(spec.in_channels, 32, 3, 2));
      deep_stem_->push_back(SyncBatchNorm2d(32));
      deep_stem_->push_back(nn::ReLU(true));
      deep_stem_->push_back(conv(32, 32, 3));
      deep_stem_->push_back(SyncBatchNorm2d(32));
      deep_stem_->push_back(nn::ReLU(true));
      deep_stem_->push_back(conv(32, 64, 3));
      register_module("conv1", deep_stem_);
    } else {
      conv1_ = register_module("conv1", conv(spec.in_channels, 64, 7, 2));
    }
    bn1_ = register_module("bn1", SyncBatchNorm2d(64));
    int64_t in = 64;
    for (size_t i = 0; i < layers.size(); ++i) {
      nn::Sequential stage;
      const int64_t planes = 64 << i;
      for (int64_t b = 0; b < layers[i]; ++b) {
        stage->push_back(
            std::make_shared<Block>(in, planes, (b == 0 && i > 0) ? 2 : 1, bottleneck, variant_d));
        in = planes * (bottleneck ? 4 : 1);
      }
      if (i == 1) feature_channels_ = in;
      stages_.push_back(register_module("layer" + std::to_string(i + 1), stage));
    }
    head_ = ClassifierHead(*this, "fc", in, spec);
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>())
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
  torch::Tensor forward(torch::Tensor x) override { return forward_with_features(x).logits; }
  ClassifierOutput forward_with_features(torch::Tensor x) override {
    ClassifierOutput out;
    x = deep_stem_ ? deep_stem_->forward(x) : conv1_->forward(x);
    x = torch::max_pool2d(bn1_->forward(x).relu_(), /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
    for (size_t i = 0; i < stages_.size(); ++i) {
      x = stages_[i]->forward(x);
      if (i == 1) out.features = x;  // layer2: stride 8
    }
    return head_.finish(std::move(out), x);
  }
  int64_t feature_channels() const override { return feature_channels_; }

 private:
  nn::Sequential deep_stem_{nullptr};  // ResNet-D: conv1 is this 3-conv stem
  nn::Conv2d conv1_{nullptr};          // otherwise a 7x7/2 conv
  SyncBatchNorm2d bn1_{nullptr};
  std::vector<nn::Sequential> stages_;
  int64_t feature_channels_ = 0;  // of layer2, the stride-8 map
  ClassifierHead head_;           // "dropout", "fc"
};

}  // namespace

std::shared_ptr<Classifier> make_resnet(const std::string& name, const ModelSpec& spec) {
  const bool d = name.back() == 'd';
  const std::optional<int> digits =
      parse_digits(std::string_view(name).substr(6, name.size() - 6 - (d ? 1 : 0)), 3);
  if (!digits) throw std::invalid_argument("no model " + name);  // the registry passes only resnetN[d]
  const int depth = *digits;
  std::vector<int64_t> layers;
  switch (depth) {
    case 18:
      layers = {2, 2, 2, 2};
      break;
    case 34:
      layers = {3, 4, 6, 3};
      break;
    case 50:
      layers = {3, 4, 6, 3};
      break;
    case 101:
      layers = {3, 4, 23, 3};
      break;
    case 152:
      layers = {3, 8, 36, 3};
      break;
    case 200:
      layers = {3, 24, 36, 3};
      break;
    default:
      throw std::invalid_argument("no ResNet of depth " + std::to_string(depth));
  }
  return std::make_shared<ResNet>(layers, depth >= 50, d, spec);
}

}  // namespace ranzcr
