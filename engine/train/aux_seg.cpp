#include "engine/train/aux_seg.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>

namespace ranzcr {

AuxSegHeadImpl::AuxSegHeadImpl(int64_t in_channels, int64_t hidden) {
  conv1_ = register_module(
      "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, hidden, 3).padding(1).bias(false)));
  bn_ = register_module("bn", SyncBatchNorm2d(hidden));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, 1, 1)));
}

torch::Tensor AuxSegHeadImpl::forward(torch::Tensor features) {
  return conv2_->forward(torch::relu(bn_->forward(conv1_->forward(features))));
}

torch::Tensor mask_targets(const torch::Tensor& masks, int64_t h, int64_t w) {
  return torch::adaptive_avg_pool2d(masks.to(torch::kFloat32), {h, w});
}

torch::Tensor aux_seg_loss_sum(const torch::Tensor& seg_logits, const torch::Tensor& targets,
                               const torch::Tensor& has_annotation) {
  const torch::Tensor per_pixel = torch::binary_cross_entropy_with_logits(
      seg_logits.to(torch::kFloat32), targets, /*weight=*/{}, /*pos_weight=*/{}, at::Reduction::None);
  const torch::Tensor per_image = per_pixel.flatten(1).mean(1);
  return (per_image * has_annotation.to(torch::kFloat32)).sum();
}

torch::Tensor aux_seg_rank_loss(const torch::Tensor& local_sum, const torch::Tensor& global_count,
                                double weight, int world_size) {
  return local_sum * (weight * world_size) / global_count.to(torch::kFloat32).clamp_min(1.0);
}

AuxSegLoss::AuxSegLoss(AuxSegHead head, double weight, Collectives* collectives)
    : head_(std::move(head)), weight_(weight), collectives_(collectives) {}

void AuxSegLoss::begin(const DeviceBatch& batch) {
  TORCH_INTERNAL_ASSERT(batch.has_annotation.defined(), "an auxiliary head needs its masks");
  masks_ = batch.masks, has_annotation_ = batch.has_annotation;
  images_ = has_annotation_.sum().to(torch::kFloat64);
  global_count_ = images_.clone();  // annotated images of this micro-batch on every rank
  if (collectives_ && collectives_->world_size() > 1) collectives_->all_reduce_sum(global_count_);
  sum_ = torch::Tensor();
}

void AuxSegLoss::forward(const torch::Tensor& features) {
  seg_logits_ = head_->forward(features);
}

torch::Tensor AuxSegLoss::loss() {
  const torch::Tensor targets = mask_targets(masks_, seg_logits_.size(2), seg_logits_.size(3));
  const torch::Tensor sum = aux_seg_loss_sum(seg_logits_, targets, has_annotation_);
  const int world = collectives_ ? collectives_->world_size() : 1;
  const torch::Tensor term = aux_seg_rank_loss(sum, global_count_, weight_, world);
  sum_ = sum.detach();
  if (!sums_.defined()) sums_ = torch::zeros({2}, sum_.options().dtype(torch::kDouble));
  sums_ += torch::stack({sum_.to(torch::kDouble), images_.to(torch::kDouble)});
  seg_logits_ = torch::Tensor();
  return term;
}

torch::Tensor AuxSegLoss::take_sums() {
  torch::Tensor out = sums_.defined() ? sums_.cpu() : torch::zeros({2}, torch::kDouble);
  sums_ = torch::Tensor();
  return out;
}

}  // namespace ranzcr
