// EfficientNet-B0..B7 (Tan & Le 2019) by compound scaling of the B0 stages, in torchvision's layout:
// MBConv blocks (expand 1x1, depthwise kxk, squeeze-excitation, project 1x1), SiLU, stochastic depth.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "models/registry.h"

namespace ranzcr {
namespace {

namespace nn = torch::nn;

int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t n = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (n < 0.9 * v) n += divisor;
  return n;
}

class ConvBnAct : public nn::Module {
 public:
  ConvBnAct(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, bool act) : act_(act) {
    conv_ = register_module(
        "conv",
        nn::Conv2d(
            nn::Conv2dOptions(in, out, k).stride(stride).padding((k - 1) / 2).groups(groups).bias(false)));
    bn_ = register_module("bn", nn::BatchNorm2d(out));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = bn_->forward(conv_->forward(x));
    return act_ ? torch::silu(x) : x;
  }

 private:
  bool act_;
  nn::Conv2d conv_{nullptr};
  nn::BatchNorm2d bn_{nullptr};
};

std::shared_ptr<ConvBnAct> conv_bn(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups,
                                   bool act) {
  return std::make_shared<ConvBnAct>(in, out, k, stride, groups, act);
}

class MBConv : public nn::Module {
 public:
  MBConv(int64_t in, int64_t out, int64_t expand_ratio, int64_t k, int64_t stride, double drop_path)
      : residual_(stride == 1 && in == out), drop_path_(drop_path) {
    const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
    if (expanded != in) block_->push_back(conv_bn(in, expanded, 1, 1, 1, true));
    block_->push_back(conv_bn(expanded, expanded, k, stride, expanded, true));
    const int64_t squeeze = std::max<int64_t>(1, in / 4);
    se_fc1_ = register_module("se_fc1", nn::Conv2d(nn::Conv2dOptions(expanded, squeeze, 1)));
    se_fc2_ = register_module("se_fc2", nn::Conv2d(nn::Conv2dOptions(squeeze, expanded, 1)));
    project_ = register_module("project", conv_bn(expanded, out, 1, 1, 1, false));
    register_module("block", block_);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = block_->forward(x);
    torch::Tensor s = torch::adaptive_avg_pool2d(y, {1, 1});
    s = torch::sigmoid(se_fc2_->forward(torch::silu(se_fc1_->forward(s))));
    y = project_->forward(y * s);
    if (!residual_) return y;
    if (is_training() && drop_path_ > 0.0) {  // stochastic depth, per sample
      const double keep = 1.0 - drop_path_;
      y = y * torch::empty({y.size(0), 1, 1, 1}, y.options()).bernoulli_(keep).div_(keep);
    }
    return y + x;
  }

 private:
  bool residual_;
  double drop_path_;
  nn::Sequential block_;
  nn::Conv2d se_fc1_{nullptr}, se_fc2_{nullptr};
  std::shared_ptr<ConvBnAct> project_;
};

class EfficientNet : public Classifier {
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
    features_->push_back(conv_bn(spec.in_channels, ch(32), 3, 2, 1, true));
    int64_t block_id = 0, in = ch(32);
    for (const auto& s : b0) {
      for (int64_t i = 0; i < reps(s.layers); ++i) {
        const double drop = 0.2 * static_cast<double>(block_id++) / static_cast<double>(total);
        features_->push_back(
            std::make_shared<MBConv>(in, ch(s.out), s.expand, s.kernel, i == 0 ? s.stride : 1, drop));
        in = ch(s.out);
      }
    }
    features_->push_back(conv_bn(in, 4 * in, 1, 1, 1, true));
    register_module("features", features_);
    dropout_ = register_module("dropout", nn::Dropout(spec.dropout));
    fc_ = register_module("classifier", nn::Linear(4 * in, spec.num_classes));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut);
        if (c->bias.defined()) nn::init::zeros_(c->bias);
      }
    }
    const double r = 1.0 / std::sqrt(static_cast<double>(spec.num_classes));
    nn::init::uniform_(fc_->weight, -r, r);
    nn::init::zeros_(fc_->bias);
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::adaptive_avg_pool2d(features_->forward(x), {1, 1}).flatten(1);
    return fc_->forward(dropout_->forward(x));
  }

 private:
  nn::Sequential features_;
  nn::Dropout dropout_{nullptr};
  nn::Linear fc_{nullptr};
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
