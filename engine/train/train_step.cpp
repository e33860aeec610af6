#include "engine/train/train_step.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>

#include <cmath>

#include "engine/train/fused_optimizer.h"

namespace ranzcr {

// One norm kernel and one multiply kernel for all gradients (multi-tensor on CUDA), as
// torch.nn.utils.clip_grad_norm_ does with foreach.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  if (grads.empty()) return torch::zeros({});
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2.0);
  const torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2.0);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  at::_foreach_mul_(grads, coef);
  return total;
}

TrainStep::TrainStep(Classifier& model, torch::optim::Optimizer& optimizer, DistributedDataParallel& ddp,
                     const torch::Device& device, StepOptions options, ExtraLoss* extra)
    : model_(model), optimizer_(optimizer), ddp_(ddp), device_(device), options_(options), extra_(extra) {
  for (const auto& group : optimizer_.param_groups())  // the model's, then any trained beside it
    for (const auto& p : group.params()) parameters_.push_back(p);
  if (options_.precision == Precision::kFp16)
    scaler_ = std::make_unique<LossScaler>(device_, options_.loss_scaler);
  skippable_ = dynamic_cast<SkippableStep*>(&optimizer_);
  for (const auto& m : model_.modules())
    if (const auto* bn = dynamic_cast<const SyncBatchNorm2dImpl*>(m.get()); bn && bn->synchronised())
      synchronised_norms_ = true;
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
  const bool empty = images.size(0) == 0;
  // Synchronised BatchNorm gathers statistics from every rank in the forward and the backward: an empty
  // batch still goes through both (a count of 0, zero gradients). Otherwise it takes no part.
  if (empty && !synchronised_norms_) return {};
  torch::Tensor logits;
  {
    Autocast autocast(device_, options_.precision);
    if (extra_) {
      ClassifierOutput out = model_.forward_with_features(images);
      logits = out.logits;
      extra_->forward(out.features);
    } else {
      logits = model_.forward(images);
    }
  }
  if (empty) {
    const torch::Tensor zero = logits.sum() * 0.0;
    if (sync) ddp_.prepare_backward(zero);
    zero.backward();
    return {};
  }
  // The losses in fp32 whatever the forward's precision.
  const torch::Tensor loss = torch::binary_cross_entropy_with_logits(logits.to(torch::kFloat32), labels);
  torch::Tensor total = extra_ ? loss + extra_->loss() : loss;
  torch::Tensor scaled = total / options_.accum_steps;
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
  if (skippable_)  // fused: skipped on the device with fp16's inf/NaN flag, no host sync
    skippable_->step_unless(scaler_ ? scaler_->found_inf_flag() : torch::Tensor());
  else if (!scaler_ || !scaler_->found_inf())
    optimizer_.step();
  if (scaler_) scaler_->update();
  optimizer_.zero_grad();
}

StepOptions step_options(const Config& config, const torch::Device& device) {
  StepOptions so;
  so.accum_steps = config.train.accum_steps;
  so.grad_clip = config.optim.grad_clip;
  so.precision = resolve_precision(config.train.precision, device);
  return so;
}

DdpOptions ddp_options(const Config& config) {
  DdpOptions o;
  o.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * 1024 * 1024);
  o.broadcast_buffers = config.distributed.bn_sync == BnSync::kBroadcast;
  return o;
}

namespace {

// The job's collectives as synchronised BatchNorm's reducer.
class CollectivesReducer : public BatchNormReducer {
 public:
  explicit CollectivesReducer(Collectives& collectives) : collectives_(collectives) {}
  int world_size() const override { return collectives_.world_size(); }
  torch::Tensor all_gather_stack(const torch::Tensor& tensor) override {
    return collectives_.all_gather_stack(tensor);
  }
  void all_reduce_sum(torch::Tensor& tensor) override { collectives_.all_reduce_sum(tensor); }

 private:
  Collectives& collectives_;
};

}  // namespace

int64_t sync_batch_norms(const Config& config, torch::nn::Module& module, Collectives& collectives) {
  if (config.distributed.bn_sync != BnSync::kSync || collectives.world_size() < 2) return 0;
  return set_batch_norm_sync(module, std::make_shared<CollectivesReducer>(collectives));
}

double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  const double floor = lr * min_ratio;
  return floor + 0.5 * (lr - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ranzcr
