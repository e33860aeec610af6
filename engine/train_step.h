// The optimizer-step policy, in one place: precision (autocast), fp16 loss scaling, gradient
// accumulation, DDP synchronisation, clipping, the learning rate and the optimizer step. The trainer and
// `ranzcr bench` run exactly this code. Nothing here reads a device value on the host (no sync) except
// fp16's inf/NaN check, which decides whether the step is skipped (as PyTorch's GradScaler does).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>

#include "distributed/ddp.h"
#include "engine/loss_scaler.h"
#include "engine/precision.h"
#include "models/registry.h"

namespace ranzcr {

struct StepOptions {
  int accum_steps = 1;                     // micro-batches per optimizer step
  double grad_clip = 0.0;                  // max global gradient norm (0 = off)
  Precision precision = Precision::kFp32;  // autocast dtype of forward (fp16 adds loss scaling)
  LossScalerOptions loss_scaler;           // fp16 only
};

/// Clips the global L2 norm of the gradients to `max_norm` like torch::nn::utils::clip_grad_norm_,
/// bit for bit, but returns the norm as a device tensor instead of reading it (no host sync).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

class TrainStep {
 public:
  TrainStep(Classifier& model, torch::optim::Optimizer& optimizer, DistributedDataParallel& ddp,
            const torch::Device& device, StepOptions options);

  /// True when micro-batch `i` (0-based) of an epoch of `n` ends an accumulation window: its backward
  /// synchronises gradients and an optimizer step follows.
  bool ends_window(int64_t i, int64_t n) const;

  /// Forward and backward of one micro-batch (images [N, C, H, W] float32 and labels [N, K] on the
  /// device). `sync`: the last micro-batch before optimizer_step(). Returns the batch's mean loss,
  /// detached, on the device (undefined for an empty batch).
  torch::Tensor forward_backward(const torch::Tensor& images, const torch::Tensor& labels, bool sync);

  /// After the `sync` micro-batch: completes the gradient all-reduce, unscales (fp16), clips, sets the
  /// learning rate, steps (skipped on inf/NaN gradients with fp16) and clears the gradients.
  void optimizer_step(double lr);

  /// The fp16 loss scaler, or null for fp32/bf16.
  LossScaler* loss_scaler() { return scaler_.get(); }
  const StepOptions& options() const { return options_; }

 private:
  Classifier& model_;
  torch::optim::Optimizer& optimizer_;
  DistributedDataParallel& ddp_;
  torch::Device device_;
  StepOptions options_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<LossScaler> scaler_;
};

}  // namespace ranzcr
