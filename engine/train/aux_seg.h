// The auxiliary segmentation head (training only, model.aux_seg_weight > 0): a light decoder on the
// backbone's stride-8 feature map that predicts the mask of the annotated devices. It is a module of
// its own, owned by the trainer, so the classifier's weights (inference, export) stay the plain model.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/types.h>

#include "distributed/collectives.h"
#include "engine/train/train_step.h"
#include "models/sync_batch_norm.h"

namespace ranzcr {

/// conv3x3 (no bias) - BN - ReLU - conv1x1: [N, C, h, w] features -> [N, 1, h, w] mask logits.
class AuxSegHeadImpl : public torch::nn::Module {
 public:
  explicit AuxSegHeadImpl(int64_t in_channels, int64_t hidden = 64);
  torch::Tensor forward(torch::Tensor features);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  SyncBatchNorm2d bn_{nullptr};
};
TORCH_MODULE(AuxSegHead);

/// The masks as targets at the logits' resolution [h, w]: the share of each cell the devices cover.
/// masks [N, 1, S, S] uint8 0/1 (S a multiple of h and w) -> [N, 1, h, w] float32 in [0, 1].
torch::Tensor mask_targets(const torch::Tensor& masks, int64_t h, int64_t w);

/// Sum over the annotated images of each image's mean per-pixel BCE (float32, as a [] tensor):
/// seg_logits [N, 1, h, w], targets [N, 1, h, w] in [0, 1], has_annotation [N] 0/1. Images without
/// annotations contribute nothing.
torch::Tensor aux_seg_loss_sum(const torch::Tensor& seg_logits, const torch::Tensor& targets,
                               const torch::Tensor& has_annotation);

/// What a rank back-propagates so that the gradients, after DDP's average over `world_size` ranks, are
/// those of weight * (sum over every rank's annotated images of their mean BCE) / (annotated images on
/// all ranks): weight * world_size * local_sum / max(1, global_count). That is one process's loss on
/// the whole global batch (a global count of 0 gives 0).
torch::Tensor aux_seg_rank_loss(const torch::Tensor& local_sum, const torch::Tensor& global_count,
                                double weight, int world_size);

/// The auxiliary loss of a training step (TrainStep's ExtraLoss): weight * aux_seg_rank_loss of the head's
/// mask logits, the masks and annotated images of each micro-batch counted over `collectives`' ranks.
class AuxSegLoss : public ExtraLoss {
 public:
  AuxSegLoss(AuxSegHead head, double weight, Collectives* collectives);
  void begin(const DeviceBatch& batch) override;
  void forward(const torch::Tensor& features) override;
  torch::Tensor loss() override;
  /// The batch's mask BCE sum over its annotated images (undefined for an empty batch).
  torch::Tensor value() const override { return sum_; }
  /// This rank's sums since the last call, [2] double on the CPU: mask BCE, annotated images (a host sync).
  torch::Tensor take_sums();

 private:
  AuxSegHead head_;
  double weight_;
  Collectives* collectives_;  // null = one process
  torch::Tensor masks_, has_annotation_, images_, global_count_, seg_logits_, sum_;
  torch::Tensor sums_;  // [2] double on the device
};

}  // namespace ranzcr
