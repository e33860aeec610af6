// EfficientNet-B0..B7 (Tan & Le 2019) by compound scaling of the B0 stages: MBConv blocks (expand 1x1,
// depthwise kxk, squeeze-excitation, project 1x1), SiLU, stochastic depth. Parameter and buffer names and
// shapes are timm's (efficientnet.py, _efficientnet_blocks.py: conv_stem, bn1, blocks.S.B.*, conv_head,
// bn2, classifier), so timm weights load by name (tests/models/timm_keys/). Modules are registered in the
// order of the earlier torchvision-named layout, which fixes the order of the seeded initialisation (same
// seed, same weights as before).
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "models/classifier_head.h"
#include "models/registry.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {
namespace {

namespace nn = torch::nn;

int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t n = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (n < 0.9 * v) n += divisor;
  return n;
}

nn::Conv2d conv2d(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t groups = 1) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, k).stride(stride).padding((k - 1) / 2).groups(groups).bias(false));
}

/// timm's SqueezeExcite: global average pool, conv_reduce (1x1, bias), SiLU, conv_expand (1x1, bias),
/// sigmoid gate.
class SqueezeExcite : public nn::Module {
 public:
  SqueezeExcite(int64_t channels, int64_t reduced) {
    conv_reduce_ = register_module("conv_reduce", nn::Conv2d(nn::Conv2dOptions(channels, reduced, 1)));
    conv_expand_ = register_module("conv_expand", nn::Conv2d(nn::Conv2dOptions(reduced, channels, 1)));
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor s = torch::adaptive_avg_pool2d(x, {1, 1});
    return x * torch::sigmoid(conv_expand_->forward(torch::silu(conv_reduce_->forward(s))));
  }

 private:
  nn::Conv2d conv_reduce_{nullptr}, conv_expand_{nullptr};
};

/// timm's InvertedResidual (conv_pw, bn1, conv_dw, bn2, se, conv_pwl, bn3) or, without expansion,
/// DepthwiseSeparableConv (conv_dw, bn1, se, conv_pw, bn2). The squeeze width is a quarter of the block's
/// input channels (timm: se_ratio 0.25 of the input, not of the expanded width).
class MBConv : public nn::Module {
 public:
  MBConv(int64_t in, int64_t out, int64_t expand_ratio, int64_t k, int64_t stride, double drop_path)
      : residual_(stride == 1 && in == out), drop_path_(drop_path) {
    const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
    expand_ = expanded != in;
    // Constructed in the order expand, depthwise, SE, project (each conv draws its default init).
    if (expand_) {
      conv_expand_ = conv2d(in, expanded, 1);
      bn_expand_ = SyncBatchNorm2d(expanded);
    }
    conv_dw_ = conv2d(expanded, expanded, k, stride, expanded);
    bn_dw_ = SyncBatchNorm2d(expanded);
    se_ = std::make_shared<SqueezeExcite>(expanded, std::max<int64_t>(1, in / 4));
    conv_project_ = conv2d(expanded, out, 1);
    bn_project_ = SyncBatchNorm2d(out);
    // Registered in the order SE, project, expand, depthwise: the earlier layout's, which the
    // re-initialisation in EfficientNet follows.
    register_module("se", se_);
    register_module(expand_ ? "conv_pwl" : "conv_pw", conv_project_);
    register_module(expand_ ? "bn3" : "bn2", bn_project_);
    if (expand_) {
      register_module("conv_pw", conv_expand_);
      register_module("bn1", bn_expand_);
    }
    register_module("conv_dw", conv_dw_);
    register_module(expand_ ? "bn2" : "bn1", bn_dw_);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = expand_ ? torch::silu(bn_expand_->forward(conv_expand_->forward(x))) : x;
    y = torch::silu(bn_dw_->forward(conv_dw_->forward(y)));
    y = bn_project_->forward(conv_project_->forward(se_->forward(y)));
    if (!residual_) return y;
    if (is_training() && drop_path_ > 0.0) {  // stochastic depth, per sample
      const double keep = 1.0 - drop_path_;
      y = y * torch::empty({y.size(0), 1, 1, 1}, y.options()).bernoulli_(keep).div_(keep);
    }
    return y + x;
  }

 private:
  bool residual_;
  bool expand_ = false;
  double drop_path_;
  nn::Conv2d conv_expand_{nullptr}, conv_dw_{nullptr}, conv_project_{nullptr};
  SyncBatchNorm2d bn_expand_{nullptr}, bn_dw_{nullptr}, bn_project_{nullptr};
  std::shared_ptr<SqueezeExcite> se_;
};

class EfficientNet : public Classifier {
  static constexpr size_t kStride8Stage = 2;  // blocks.2 (40 channels in B0): the first at stride 8

 public:
  EfficientNet(double width, double depth, const ModelSpec& spec) {
    struct Stage {
      int64_t expand, kernel, stride, in, out, layers;
    };
    const std::vector<Stage> b0 = {{1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},
                                   {6, 3, 2, 40, 80, 3},  {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4},
                                   {6, 3, 1, 192, 320, 1}};
    auto ch = [&](int64_t c) { return make_divisible(c * width); };
    auto reps = [&](int64_t n) { return static_cast<int64_t>(std::ceil(n * depth)); };
    int64_t total = 0;
    for (const auto& s : b0) total += reps(s.layers);
    conv_stem_ = register_module("conv_stem", conv2d(spec.in_channels, ch(32), 3, 2));
    bn1_ = register_module("bn1", SyncBatchNorm2d(ch(32)));
    int64_t block_id = 0, in = ch(32);
    for (const auto& s : b0) {
      nn::Sequential stage;
      for (int64_t i = 0; i < reps(s.layers); ++i) {
        const double drop = 0.2 * static_cast<double>(block_id++) / static_cast<double>(total);
        stage->push_back(
            std::make_shared<MBConv>(in, ch(s.out), s.expand, s.kernel, i == 0 ? s.stride : 1, drop));
        in = ch(s.out);
      }
      blocks_->push_back(stage);
      if (stages_.size() == kStride8Stage) feature_channels_ = in;
      stages_.push_back(stage);
    }
    register_module("blocks", blocks_);
    const int64_t features = ch(1280);  // = 4 * ch(320) for B0..B7
    conv_head_ = register_module("conv_head", conv2d(in, features, 1));
    bn2_ = register_module("bn2", SyncBatchNorm2d(features));
    head_ = ClassifierHead(*this, "classifier", features, spec);
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut);
        if (c->bias.defined()) nn::init::zeros_(c->bias);
      }
    }
    const double r = 1.0 / std::sqrt(static_cast<double>(spec.num_classes));
    nn::init::uniform_(head_.linear()->weight, -r, r);
    nn::init::zeros_(head_.linear()->bias);
  }
  torch::Tensor forward(torch::Tensor x) override { return forward_with_features(x).logits; }
  ClassifierOutput forward_with_features(torch::Tensor x) override {
    ClassifierOutput out;
    x = torch::silu(bn1_->forward(conv_stem_->forward(x)));
    for (size_t i = 0; i < stages_.size(); ++i) {
      x = stages_[i]->forward(x);
      if (i == kStride8Stage) out.features = x;
    }
    return head_.finish(std::move(out), torch::silu(bn2_->forward(conv_head_->forward(x))));
  }
  int64_t feature_channels() const override { return feature_channels_; }

 private:
  nn::Conv2d conv_stem_{nullptr}, conv_head_{nullptr};
  SyncBatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::ModuleList blocks_;               // "blocks": the stages, by index
  std::vector<nn::Sequential> stages_;  // the same stages, each a Sequential of MBConv blocks
  int64_t feature_channels_ = 0;        // of blocks.2, the stride-8 map
  ClassifierHead head_;                 // "dropout", "classifier"
};

}  // namespace

std::shared_ptr<Classifier> make_efficientnet(const std::string& name, const ModelSpec& spec) {
  // (width, depth) multipliers of B0..B7.
  static const double kScale[8][2] = {{1.0, 1.0}, {1.0, 1.1}, {1.1, 1.2}, {1.2, 1.4},
                                      {1.4, 1.8}, {1.6, 2.2}, {1.8, 2.6}, {2.0, 3.1}};
  const int b = name.back() - '0';
  if (name.rfind("efficientnet_b", 0) != 0 || b < 0 || b > 7) throw std::invalid_argument("no model " + name);
  return std::make_shared<EfficientNet>(kScale[b][0], kScale[b][1], spec);
}

}  // namespace ranzcr
