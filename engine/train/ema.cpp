#include "engine/train/ema.h"

#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/_foreach_lerp.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace ranzcr {
namespace {

// Parameters then buffers, in registration order: the same order for two modules of one architecture.
std::vector<torch::Tensor> state_tensors(torch::nn::Module& m) {
  std::vector<torch::Tensor> out = m.parameters();
  for (const auto& b : m.buffers()) out.push_back(b);
  return out;
}

}  // namespace

double ema_decay_at(int64_t step, const EmaOptions& o) {
  const double s = static_cast<double>(std::max<int64_t>(0, step - 1));
  if (s <= 0) return 0.0;
  const double warm = 1.0 - std::pow(1.0 + s, -o.warmup_power);
  return std::max(std::min(warm, o.decay), o.min_decay);
}

ModelEma::ModelEma(torch::nn::Module& model, std::shared_ptr<torch::nn::Module> shadow, EmaOptions options)
    : model_tensors_(state_tensors(model)), shadow_(std::move(shadow)), options_(options) {
  shadow_tensors_ = state_tensors(*shadow_);
  TORCH_CHECK(shadow_tensors_.size() == model_tensors_.size(), "ModelEma: the shadow's architecture differs");
  for (auto& p : shadow_->parameters()) p.set_requires_grad(false);
  shadow_->eval();
  reset();
}

void ModelEma::reset() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shadow_tensors_.size(); ++i) shadow_tensors_[i].copy_(model_tensors_[i]);
}

// Two multi-tensor kernels (on CUDA) for the whole model, not one per tensor.
void ModelEma::update(int64_t step) {
  const double d = ema_decay_at(step, options_);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> ema_float, w_float, ema_other, w_other;
  for (size_t i = 0; i < shadow_tensors_.size(); ++i) {
    const bool floating = shadow_tensors_[i].is_floating_point();
    (floating ? ema_float : ema_other).push_back(shadow_tensors_[i].detach());
    (floating ? w_float : w_other).push_back(model_tensors_[i].detach());
  }
  if (!ema_float.empty()) at::_foreach_lerp_(ema_float, w_float, 1.0 - d);
  if (!ema_other.empty()) at::_foreach_copy_(ema_other, w_other);
}

}  // namespace ranzcr
