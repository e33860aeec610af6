// The optimizer-step policy, in one place: precision (autocast), fp16 loss scaling, gradient
// accumulation, DDP synchronisation, clipping, the learning rate (its schedule too) and the optimizer step.
// The trainer and `ranzcr bench` run exactly this code. Nothing here reads a device value on the host (no
// sync): with the fused optimizers (engine/train/fused_optimizer.h) even fp16's skipped step is decided on
// the device, as PyTorch's GradScaler does with fused=True; another optimizer reads the inf/NaN flag (a
// sync).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>

#include "distributed/collectives.h"
#include "distributed/ddp.h"
#include "engine/config/config.h"
#include "engine/runtime/device_batches.h"
#include "engine/runtime/precision.h"
#include "engine/train/loss_scaler.h"
#include "models/registry.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {

class SkippableStep;

struct StepOptions {
  int accum_steps = 1;                     // micro-batches per optimizer step
  double grad_clip = 0.0;                  // max global gradient norm (0 = off)
  Precision precision = Precision::kFp32;  // autocast dtype of forward (fp16 adds loss scaling)
  LossScalerOptions loss_scaler;           // fp16 only
};

/// A loss on the backbone's features that joins the classification loss in the same backward (the
/// auxiliary segmentation head, engine/train/aux_head_feature.cpp). With one, the step runs the model's
/// forward_with_features. Its module's parameters must be in the optimizer and in what DDP synchronises.
class ExtraLoss {
 public:
  virtual ~ExtraLoss() = default;
  /// Before each micro-batch's forward, on every rank, also for an empty batch (it may run collectives).
  virtual void begin(const DeviceBatch& batch) = 0;
  /// Under the forward's autocast, for a non-empty batch: the head's forward on the features.
  virtual void forward(const torch::Tensor& features) = 0;
  /// After it, in fp32: what to add to the classification loss before the backward.
  virtual torch::Tensor loss() = 0;
  /// The batch's figure for the divergence check (detached; undefined for an empty batch).
  virtual torch::Tensor value() const = 0;
};

/// Clips the global L2 norm of the gradients to `max_norm` like torch::nn::utils::clip_grad_norm_,
/// bit for bit, with two multi-tensor kernels, and returns the norm as a device tensor instead of reading
/// it (no host sync).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

class TrainStep {
 public:
  TrainStep(Classifier& model, torch::optim::Optimizer& optimizer, DistributedDataParallel& ddp,
            const torch::Device& device, StepOptions options, ExtraLoss* extra = nullptr);

  /// True when micro-batch `i` (0-based) of an epoch of `n` ends an accumulation window: its backward
  /// synchronises gradients and an optimizer step follows.
  bool ends_window(int64_t i, int64_t n) const;

  /// Forward and backward of one micro-batch (images [N, C, H, W] float32 and labels [N, K] on the
  /// device). `sync`: the last micro-batch before optimizer_step(). Returns the batch's mean
  /// classification loss, detached, on the device (undefined for an empty batch). With an ExtraLoss,
  /// its begin() has been called for this batch, and the backward adds its loss().
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
  ExtraLoss* extra_ = nullptr;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<LossScaler> scaler_;
  SkippableStep* skippable_ = nullptr;  // the optimizer, when it can skip a step on the device
  bool synchronised_norms_ = false;  // the model's BatchNorms take statistics over the ranks (bn_sync: sync)
};

/// The step policy the config asks for on `device` (precision resolved).
StepOptions step_options(const Config& config, const torch::Device& device);
/// The DDP wrapper's options (bucket size, BatchNorm statistics policy).
DdpOptions ddp_options(const Config& config);
/// distributed.bn_sync: sync: gives every SyncBatchNorm2d of `module` the job's collectives (nothing in a job
/// of one process or with another bn_sync); the number of layers synchronised. `collectives` outlives
/// `module`'s training.
int64_t sync_batch_norms(const Config& config, torch::nn::Module& module, Collectives& collectives);
/// Learning rate at optimizer step `step` (0-based): linear warmup to `lr` over `warmup_steps`, then
/// cosine decay to lr * min_ratio at `total_steps`.
double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio);

}  // namespace ranzcr
