// Exponential moving average of a model's weights, as timm's ModelEmaV3 with its decay warm-up: after
// optimizer update `step` (1-based), every floating-point parameter and buffer of the shadow copy moves
// towards the model's, ema = ema + (1 - d) (w - ema), with d = clamp(1 - (1 + (step - 1))^-power,
// min_decay, decay) and d = 0 (a plain copy) for the first update; integer buffers are copied. The
// shadow lives on the model's device; updating it never waits for the device.
#pragma once

#include <torch/nn/module.h>

#include <memory>

namespace ranzcr {

struct EmaOptions {
  double decay = 0.9998;            // the decay after the warm-up (train.ema_decay)
  double warmup_power = 2.0 / 3.0;  // timm's default; 3/4 suits short runs
  double min_decay = 0.0;
};

/// The decay used for optimizer update `step` (1-based), per EmaOptions.
double ema_decay_at(int64_t step, const EmaOptions& options);

class ModelEma {
 public:
  /// `shadow` has the model's architecture; it starts as a copy of `model`'s weights.
  ModelEma(torch::nn::Module& model, std::shared_ptr<torch::nn::Module> shadow, EmaOptions options);
  /// After optimizer update `step` (1-based).
  void update(int64_t step);
  /// Starts over from the model's current weights.
  void reset();
  /// The averaged weights, a module like the model's (evaluate it, save it).
  torch::nn::Module& module() { return *shadow_; }
  std::shared_ptr<torch::nn::Module> module_ptr() { return shadow_; }

 private:
  std::vector<torch::Tensor> model_tensors_, shadow_tensors_;
  std::shared_ptr<torch::nn::Module> shadow_;
  EmaOptions options_;
};

}  // namespace ranzcr
