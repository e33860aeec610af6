// Dynamic loss scaling for fp16 training, as PyTorch's GradScaler does: the loss is multiplied by a
// large scale so small fp16 gradients do not flush to zero; gradients are divided back before
// clipping; a step whose gradients hold inf/NaN is skipped and the scale backs off; after
// `growth_interval` clean steps the scale grows. All state lives on the gradients' device.
#pragma once

#include <torch/types.h>

#include <vector>

namespace ranzcr {

struct LossScalerOptions {
  double init_scale = 65536.0;     // 2^16, PyTorch's default
  double growth_factor = 2.0;      // scale *= growth_factor after growth_interval clean steps
  double backoff_factor = 0.5;     // scale *= backoff_factor after a step with inf/NaN gradients
  int64_t growth_interval = 2000;  // clean steps between growths
};

class LossScaler {
 public:
  explicit LossScaler(const torch::Device& device, LossScalerOptions options = {});

  /// loss * scale (what backward runs on).
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides every defined gradient by the scale, in place, and records on the device whether any
  /// element is inf or NaN. Call once per optimizer step, before clipping.
  void unscale(const std::vector<torch::Tensor>& parameters);
  /// Whether the last unscale() met inf/NaN: the step must be skipped. Reads the device (a host sync).
  bool found_inf() const;
  /// The same on the device: [1] float32, 1 when the last unscale() met inf/NaN (for a fused optimizer).
  const torch::Tensor& found_inf_flag() const { return found_inf_; }
  /// Backs the scale off after inf/NaN, grows it after growth_interval clean steps. On the device.
  void update();

  /// The current scale (reads the device).
  double scale_value() const;
  /// Clean steps since the last growth or backoff (reads the device).
  int64_t growth_tracker() const;
  /// Restores a saved state (checkpoints).
  void load(double scale, int64_t growth_tracker);

 private:
  LossScalerOptions options_;
  torch::Tensor scale_;           // [1] float32
  torch::Tensor growth_tracker_;  // [1] int32
  torch::Tensor found_inf_;       // [1] float32, 0 or 1
};

}  // namespace ranzcr
