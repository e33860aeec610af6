#include "engine/train/fused_optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <utility>

#include "engine/runtime/precision.h"

namespace ranzcr {
namespace {

using torch::optim::OptimizerParamGroup;

std::vector<torch::Tensor> with_grads(const OptimizerParamGroup& group) {
  std::vector<torch::Tensor> out;
  for (const auto& p : group.params())
    if (p.grad().defined()) out.push_back(p);
  return out;
}

// Whether one fused kernel can take every parameter that has a gradient: dense float tensors on one CPU or
// CUDA device, in one dtype, with gradients of that dtype.
bool kernel_applies(const std::vector<OptimizerParamGroup>& groups) {
  std::optional<torch::Device> device;
  std::optional<torch::ScalarType> dtype;
  for (const auto& group : groups)
    for (const auto& p : with_grads(group)) {
      const torch::Tensor& g = p.grad();
      if (!device) device = p.device(), dtype = p.scalar_type();
      const bool float_type = *dtype == torch::kFloat32 || *dtype == torch::kFloat64 ||
                              *dtype == torch::kFloat16 || *dtype == torch::kBFloat16;
      if (!float_type || !(device->is_cpu() || device->is_cuda())) return false;
      if (p.device() != *device || p.scalar_type() != *dtype || g.scalar_type() != *dtype ||
          g.device() != *device || p.is_sparse() || g.is_sparse() || !p.is_non_overlapping_and_dense())
        return false;
    }
  return true;
}

// The parameter's gradient in the parameter's own layout (DDP or a user may have left another one).
const torch::Tensor& grad_in_layout(torch::Tensor& p) {
  if (!same_layout(p.grad(), p)) p.mutable_grad() = in_layout_of(p.grad(), p);
  return p.grad();
}

std::optional<torch::Tensor> flag(const torch::Tensor& found_inf) {
  if (!found_inf.defined()) return std::nullopt;
  return found_inf;
}

// What LibTorch's optimizers do with a closure: evaluate it with gradients on.
torch::Tensor evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

// The per-parameter path's skip decision: reads the flag (a host sync).
bool skip_per_parameter_step(const torch::Tensor& found_inf) {
  return found_inf.defined() && found_inf.item<float>() != 0.0f;
}

}  // namespace

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.sizes().equals(b.sizes())) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

torch::Tensor in_layout_of(const torch::Tensor& t, const torch::Tensor& like) {
  if (t.device() == like.device() && same_layout(t, like)) return t;
  torch::Tensor out = at::empty_strided(like.sizes(), like.strides(), t.options().device(like.device()));
  out.copy_(t);
  return out;
}

// ---- What both share --------------------------------------------------------------------------------------

template <class Base, class Options>
FusedOptimizer<Base, Options>::FusedOptimizer(std::vector<torch::Tensor> params, Options options, bool fused)
    : Base(std::move(params), std::move(options)), fused_(fused) {}

template <class Base, class Options>
torch::Tensor FusedOptimizer<Base, Options>::step(LossClosure closure) {
  torch::Tensor loss = evaluate(closure);
  step_unless(torch::Tensor());
  return loss;
}

template <class Base, class Options>
void FusedOptimizer<Base, Options>::step_unless(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  last_fused_ = fused_ && fused_step(found_inf);
  if (last_fused_) return;
  if (skip_per_parameter_step(found_inf)) return;
  before_per_parameter_step();
  Base::step();
}

template <class Base, class Options>
bool FusedOptimizer<Base, Options>::fused_step(const torch::Tensor& found_inf) {
  for (const auto& group : this->param_groups_)
    if (!kernel_takes(static_cast<const Options&>(group.options()))) return false;
  if (!kernel_applies(this->param_groups_)) return false;
  for (auto& group : this->param_groups_)
    fused_group_step(group, static_cast<const Options&>(group.options()), found_inf);
  return true;
}

template class FusedOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions>;
template class FusedOptimizer<torch::optim::SGD, torch::optim::SGDOptions>;

// ---- AdamW ------------------------------------------------------------------------------------------------

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options, bool fused)
    : FusedOptimizer(std::move(params), std::move(options), fused) {}

bool FusedAdamW::kernel_takes(const torch::optim::AdamWOptions& options) const {
  return !options.amsgrad();
}

void FusedAdamW::fused_group_step(OptimizerParamGroup& group, const torch::optim::AdamWOptions& o,
                                  const torch::Tensor& found_inf) {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  for (auto& p : with_grads(group)) {
    auto& s = state_of<torch::optim::AdamWParamState>(p, [&p](auto& created) {  // as LibTorch's AdamW
      created.step(0);
      created.exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      created.exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    });
    s.exp_avg(in_layout_of(s.exp_avg(), p));
    s.exp_avg_sq(in_layout_of(s.exp_avg_sq(), p));
    torch::Tensor& step = steps_[p.unsafeGetTensorImpl()];
    if (!step.defined())
      step = torch::full({}, static_cast<double>(s.step()), p.options().dtype(torch::kFloat32));
    grads.push_back(grad_in_layout(p));
    params.push_back(p);
    exp_avgs.push_back(s.exp_avg());
    exp_avg_sqs.push_back(s.exp_avg_sq());
    steps.push_back(step);
  }
  if (params.empty()) return;
  // As torch.optim's fused path: the counts go up first (the kernel's bias correction reads them) and
  // back down where the step was skipped.
  at::_foreach_add_(steps, 1);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, o.lr(), std::get<0>(o.betas()),
                    std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                    /*maximize=*/false, /*grad_scale=*/std::nullopt, flag(found_inf));
  if (found_inf.defined())
    at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), found_inf.reshape({})));
}

void FusedAdamW::before_per_parameter_step() {
  sync_steps();
  steps_.clear();
}

void FusedAdamW::sync_steps() const {
  if (steps_.empty()) return;
  std::vector<void*> keys;
  std::vector<torch::Tensor> counts;
  for (const auto& [key, count] : steps_) {
    keys.push_back(key);
    counts.push_back(count.to(steps_.begin()->second.device()));
  }
  const torch::Tensor host = torch::stack(counts).to(torch::kCPU, torch::kFloat64);  // one read
  const double* values = host.data_ptr<double>();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = state_.find(keys[i]);
    if (it != state_.end())
      static_cast<torch::optim::AdamWParamState&>(*it->second).step(static_cast<int64_t>(values[i]));
  }
}

void FusedAdamW::save(torch::serialize::OutputArchive& archive) const {
  sync_steps();
  torch::optim::AdamW::save(archive);
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  steps_.clear();  // taken from the loaded state at the next step
}

// ---- SGD --------------------------------------------------------------------------------------------------

FusedSgd::FusedSgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options, bool fused)
    : FusedOptimizer(std::move(params), std::move(options), fused) {}

bool FusedSgd::kernel_takes(const torch::optim::SGDOptions& options) const {
  // LibTorch starts a momentum buffer as the first gradient; a zero buffer gives exactly that only
  // without dampening.
  return options.dampening() == 0;
}

void FusedSgd::fused_group_step(OptimizerParamGroup& group, const torch::optim::SGDOptions& o,
                                const torch::Tensor& found_inf) {
  std::vector<torch::Tensor> params, grads, buffers;
  for (auto& p : with_grads(group)) {
    if (o.momentum() != 0) {
      auto& s = state_of<torch::optim::SGDParamState>(p, [&p](auto& created) {
        created.momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      });
      s.momentum_buffer(in_layout_of(s.momentum_buffer(), p));
      buffers.push_back(s.momentum_buffer());
    }
    grads.push_back(grad_in_layout(p));
    params.push_back(p);
  }
  if (params.empty()) return;
  at::_fused_sgd_(params, grads, buffers, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                  /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::nullopt, flag(found_inf));
}

namespace {

// optim.fused auto follows torch.optim's defaults: the fused/multi-tensor kernels for CUDA parameters, the
// per-parameter step on a CPU (where nothing is launched, and the numbers stay LibTorch's).
bool use_fused_kernels(const OptimConfig& o, const std::vector<torch::Tensor>& parameters) {
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  return resolve_on_for_cuda(o.fused, device);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        std::vector<torch::Tensor> parameters) {
  const bool fused = use_fused_kernels(o, parameters);
  if (o.name == OptimizerName::kSgd)
    return std::make_unique<FusedSgd>(
        parameters,
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(true).weight_decay(o.weight_decay),
        fused);
  return std::make_unique<FusedAdamW>(parameters,
                                      torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay), fused);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, Classifier& model) {
  return make_optimizer(o, model.parameters());
}

}  // namespace ranzcr
