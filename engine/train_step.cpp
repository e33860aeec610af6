#include "engine/train_step.h"

namespace ranzcr {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({});
  for (const auto& g : grads) norms.push_back(g.data().norm(2.0));
  const torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2.0);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (auto& g : grads) g.data().mul_(coef);
  return total;
}

TrainStep::TrainStep(Classifier& model, torch::optim::Optimizer& optimizer, DistributedDataParallel& ddp,
                     const torch::Device& device, StepOptions options)
    : model_(model), optimizer_(optimizer), ddp_(ddp), device_(device), options_(options) {
  parameters_ = model_.parameters();
  if (options_.precision == Precision::kFp16)
    scaler_ = std::make_unique<LossScaler>(device_, options_.loss_scaler);
}

bool TrainStep::ends_window(int64_t i, int64_t n) const {
  return (i + 1) % options_.accum_steps == 0 || i + 1 == n;
}

torch::Tensor TrainStep::forward_backward(const torch::Tensor& images, const torch::Tensor& labels,
                                          bool sync) {
  ddp_.set_require_sync(sync);
  // Every rank takes part in the buffer broadcast, also one whose batch came out empty (all images
  // unreadable and skipped): otherwise the ranks' collectives no longer pair up. Its gradients count as
  // zeros in the all-reduce (finish_gradient_sync).
  ddp_.before_forward();
  if (images.size(0) == 0) return {};
  torch::Tensor logits;
  {
    Autocast autocast(device_, options_.precision);
    logits = model_.forward(images);
  }
  // The loss in fp32 whatever the forward's precision.
  const torch::Tensor loss = torch::binary_cross_entropy_with_logits(logits.to(torch::kFloat32), labels);
  torch::Tensor scaled = loss / options_.accum_steps;
  if (scaler_) scaled = scaler_->scale(scaled);
  if (sync) ddp_.prepare_backward(scaled);
  scaled.backward();
  return loss.detach();
}

void TrainStep::optimizer_step(double lr) {
  ddp_.finish_gradient_sync();
  if (scaler_) scaler_->unscale(parameters_);
  if (options_.grad_clip > 0) clip_grad_norm(parameters_, options_.grad_clip);
  for (auto& group : optimizer_.param_groups()) group.options().set_lr(lr);
  if (!scaler_ || !scaler_->found_inf()) optimizer_.step();
  if (scaler_) scaler_->update();
  optimizer_.zero_grad();
}

}  // namespace ranzcr
