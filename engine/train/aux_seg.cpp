#include "engine/train/aux_seg.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>

namespace ranzcr {

AuxSegHeadImpl::AuxSegHeadImpl(int64_t in_channels, int64_t hidden) {
  conv1_ = register_module(
      "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, hidden, 3).padding(1).bias(false)));
  bn_ = register_module("bn", torch::nn::BatchNorm2d(hidden));
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

}  // namespace ranzcr
