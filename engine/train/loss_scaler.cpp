#include "engine/train/loss_scaler.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>

namespace ranzcr {

LossScaler::LossScaler(const torch::Device& device, LossScalerOptions options) : options_(options) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, options_.init_scale, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f32);
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  return loss * scale_.to(loss.scalar_type());
}

void LossScaler::unscale(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  found_inf_.zero_();
  if (grads.empty()) return;
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat32);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
}

bool LossScaler::found_inf() const {
  return found_inf_.item<float>() != 0.0f;
}

void LossScaler::update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

double LossScaler::scale_value() const {
  return scale_.item<double>();
}

int64_t LossScaler::growth_tracker() const {
  return growth_tracker_.item<int64_t>();
}

void LossScaler::load(double scale, int64_t growth_tracker) {
  scale_.fill_(scale);
  growth_tracker_.fill_(growth_tracker);
}

}  // namespace ranzcr
