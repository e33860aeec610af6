// The optimizer-step policy, in one place: precision (autocast), fp16 loss scaling, gradient
// accumulation, DDP synchronisation, clipping, the learning rate and the optimizer step. The trainer and
// `ranzcr bench` run exactly this code. Nothing here reads a device value on the host (no sync): with the
// fused optimizers (engine/train/fused_optimizer.h) even fp16's skipped step is decided on the device, as
// PyTorch's GradScaler does with fused=True; another optimizer reads the inf/NaN flag (a sync).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>

#include "distributed/collectives.h"
#include "distributed/ddp.h"
#include "engine/train/aux_seg.h"
#include "engine/train/loss_scaler.h"
#include "engine/runtime/precision.h"
#include "models/registry.h"

namespace ranzcr {

class SkippableStep;

struct StepOptions {
  int accum_steps = 1;                     // micro-batches per optimizer step
  double grad_clip = 0.0;                  // max global gradient norm (0 = off)
  Precision precision = Precision::kFp32;  // autocast dtype of forward (fp16 adds loss scaling)
  LossScalerOptions loss_scaler;           // fp16 only
};

/// The auxiliary segmentation loss of a step (off when `head` is null). The head's parameters must be in
/// the optimizer and in the module the DDP wrapper synchronises.
struct AuxSegStep {
  AuxSegHead head{nullptr};
  double weight = 0.0;                 // model.aux_seg_weight
  Collectives* collectives = nullptr;  // annotated images are counted over these ranks (null = one)
};

/// A micro-batch's device masks, for the auxiliary loss.
struct AuxTarget {
  torch::Tensor masks;           // [N, 1, S, S] uint8 0/1 on the device
  torch::Tensor has_annotation;  // [N] float32 0/1 on the device
};

/// Clips the global L2 norm of the gradients to `max_norm` like torch::nn::utils::clip_grad_norm_,
/// bit for bit, with two multi-tensor kernels, and returns the norm as a device tensor instead of reading
/// it (no host sync).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

class TrainStep {
 public:
  TrainStep(Classifier& model, torch::optim::Optimizer& optimizer, DistributedDataParallel& ddp,
            const torch::Device& device, StepOptions options, AuxSegStep aux = {});

  /// True when micro-batch `i` (0-based) of an epoch of `n` ends an accumulation window: its backward
  /// synchronises gradients and an optimizer step follows.
  bool ends_window(int64_t i, int64_t n) const;

  /// Forward and backward of one micro-batch (images [N, C, H, W] float32 and labels [N, K] on the
  /// device). `sync`: the last micro-batch before optimizer_step(). Returns the batch's mean
  /// classification loss, detached, on the device (undefined for an empty batch). With an auxiliary
  /// head, `aux` must be given on every rank, also for an empty batch (the annotated images are counted
  /// over the ranks), and the backward adds aux_seg_rank_loss.
  torch::Tensor forward_backward(const torch::Tensor& images, const torch::Tensor& labels, bool sync,
                                 const AuxTarget* aux = nullptr);
  /// After forward_backward with an auxiliary head: this rank's sum of per-image mask BCE and its number
  /// of annotated images (detached [] tensors on the device; undefined for an empty batch).
  const torch::Tensor& aux_loss_sum() const { return aux_sum_; }
  const torch::Tensor& aux_images() const { return aux_images_; }

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
  AuxSegStep aux_;
  torch::Tensor aux_sum_, aux_images_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<LossScaler> scaler_;
  SkippableStep* skippable_ = nullptr;  // the optimizer, when it can skip a step on the device
};

}  // namespace ranzcr
