#include "models/sync_batch_norm.h"

#include <ATen/ops/batch_norm_backward_elemt.h>
#include <ATen/ops/batch_norm_backward_reduce.h>
#include <ATen/ops/batch_norm_elemt.h>
#include <ATen/ops/batch_norm_gather_stats_with_counts.h>
#include <ATen/ops/batch_norm_stats.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ranzcr {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Statistics in float32 at least (bf16/fp16 inputs under autocast), float64 for float64 inputs.
torch::Dtype stats_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Every dimension but the channels' (1).
std::vector<int64_t> reduced_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against x: (1, C, 1, ...).
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = x.size(1);
  return v.view(shape);
}

// The statistics every rank's forward ends with, and what its backward needs.
struct GlobalStats {
  torch::Tensor mean, invstd;  // over every rank's batch, per channel (float32 at least)
  torch::Tensor count;         // the composite path: the global count (a one-element tensor);
                               // ATen's kernels: each rank's count (int32), which they sum themselves
};

// The composite path (CPU, and CUDA without running statistics): each rank's count, mean and sum of squared
// deviations (var_mean: one pass, Welford's, no cancellation) in one row, gathered, merged as Chan et al.:
// each rank weighted by its count. The global count stays a tensor: reading it on the host would make every
// layer wait.
GlobalStats composite_stats(const torch::Tensor& x, torch::Tensor& running_mean, torch::Tensor& running_var,
                            double momentum, double eps, BatchNormReducer& reducer) {
  const int64_t channels = x.size(1);
  const int64_t count = channels == 0 ? 0 : x.numel() / channels;
  torch::Tensor mean = torch::zeros({channels}, x.options()), m2 = torch::zeros({channels}, x.options());
  if (count > 0) {
    torch::Tensor var;
    std::tie(var, mean) = torch::var_mean(x, reduced_dims(x), /*unbiased=*/false);
    m2 = var * static_cast<double>(count);
  }
  const torch::Tensor all = reducer.all_gather_stack(
      torch::cat({torch::full({1}, static_cast<double>(count), x.options()), mean, m2}));  // (ranks, 1 + 2C)
  const torch::Tensor counts = all.narrow(1, 0, 1), means = all.narrow(1, 1, channels),
                      m2s = all.narrow(1, 1 + channels, channels);
  const torch::Tensor n = counts.sum(0);
  const torch::Tensor global_mean = (counts * means).sum(0) / n;
  const torch::Tensor global_m2 = (m2s + counts * (means - global_mean).square()).sum(0);
  if (running_mean.numel() > 0) {
    torch::NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.scalar_type()), momentum);
    running_var.mul_(1 - momentum).add_((global_m2 / (n - 1)).to(running_var.scalar_type()), momentum);
  }
  return {global_mean, (global_m2 / n + eps).rsqrt(), n};
}

// ATen's SyncBatchNorm kernels (CUDA), as torch.nn.SyncBatchNorm calls them, without its host read: each
// rank's mean and invstd (batch_norm_stats) and count in one row, gathered;
// batch_norm_gather_stats_with_counts merges them and updates the running statistics in one kernel. That
// kernel merges the ranks in order and would divide 0 by 0 if a rank with no images came first: PyTorch drops
// such rows (reading the counts on the host), here they are sorted last (on the device; a stable sort, so the
// same order on every rank), where a count of 0 with a finite invstd adds nothing to the variance and moves
// the mean by at most a rounding (n * (1/n) is not always 1 in float32).
GlobalStats kernel_stats(const torch::Tensor& x, const torch::Tensor& running_mean,
                         const torch::Tensor& running_var, double momentum, double eps,
                         BatchNormReducer& reducer) {
  const int64_t channels = x.size(1);
  const int64_t count = channels == 0 ? 0 : x.numel() / channels;
  torch::Tensor mean, invstd;
  if (count > 0) {
    std::tie(mean, invstd) = at::batch_norm_stats(x, eps);
  } else {
    mean = torch::zeros({channels}, x.options().dtype(stats_dtype(x)));
    invstd = torch::ones({channels}, mean.options());
  }
  torch::Tensor all = reducer.all_gather_stack(
      torch::cat({mean, invstd, torch::full({1}, static_cast<double>(count), mean.options())}));
  all = all.index_select(0, all.select(1, 2 * channels).argsort(/*stable=*/true, 0, /*descending=*/true));
  const torch::Tensor counts = all.select(1, 2 * channels).contiguous();
  torch::Tensor global_mean, global_invstd;
  std::tie(global_mean, global_invstd) = at::batch_norm_gather_stats_with_counts(
      x, all.narrow(1, 0, channels).contiguous(), all.narrow(1, channels, channels).contiguous(),
      running_mean, running_var, momentum, eps, counts.to(running_mean.scalar_type()));
  return {global_mean, global_invstd, counts.to(torch::kInt)};
}

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps,
                               BatchNormReducer* reducer) {
    // ATen's kernels on CUDA; they take the running statistics' dtype for the counts, so without running
    // statistics (never in the zoo) a bf16 input would count in bf16: the composite path then.
    const bool kernels = input.is_cuda() && running_mean.numel() > 0;
    ctx->saved_data["kernels"] = kernels;
    // The module that called this owns the reducer and outlives the backward of its forward.
    ctx->saved_data["reducer"] = reinterpret_cast<int64_t>(reducer);
    if (kernels) {
      const torch::Tensor x = input.contiguous(input.suggest_memory_format());
      const GlobalStats stats = kernel_stats(x, running_mean, running_var, momentum, eps, *reducer);
      ctx->save_for_backward({x, weight, stats.mean, stats.invstd, stats.count});
      if (x.numel() == 0) return torch::empty_like(x);
      return at::batch_norm_elemt(x, optional(weight), optional(bias), stats.mean, stats.invstd, eps);
    }
    const torch::Tensor x = input.to(stats_dtype(input));
    const GlobalStats stats = composite_stats(x, running_mean, running_var, momentum, eps, *reducer);
    // y = x * scale + shift per channel in one pass, as torch's CPU BatchNorm computes it.
    torch::Tensor scale = stats.invstd, shift = -stats.mean * stats.invstd;
    if (weight.numel() > 0) {
      scale = scale * weight.to(x.scalar_type());
      shift = bias.to(x.scalar_type()) - stats.mean * scale;
    }
    ctx->save_for_backward({input, weight, stats.mean, stats.invstd, stats.count});
    return torch::addcmul(per_channel(shift, x), x, per_channel(scale, x)).to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto* reducer = reinterpret_cast<BatchNormReducer*>(ctx->saved_data["reducer"].toInt());
    const GlobalStats stats{saved[2], saved[3], saved[4]};
    const auto [grad_input, grad_weight, grad_bias] =
        ctx->saved_data["kernels"].toBool()
            ? kernel_backward(grads[0], saved[0], saved[1], stats, ctx->needs_input_grad(0), *reducer)
            : composite_backward(grads[0], saved[0], saved[1], stats, ctx->needs_input_grad(0), *reducer);
    return {grad_input,      grad_weight,     grad_bias,       torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  using Grads = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;

  // An empty tensor (the autograd function's stand-in for a missing one) as ATen's optional argument.
  static std::optional<torch::Tensor> optional(const torch::Tensor& t) {
    return t.numel() > 0 ? std::optional<torch::Tensor>(t) : std::nullopt;
  }

  // This rank's weight and bias gradients (DDP then averages them); the input's from the sums of the
  // gradient and of gradient times (x - mean) over every rank, in one all-reduce.
  static Grads composite_backward(const torch::Tensor& grad, const torch::Tensor& input,
                                  const torch::Tensor& weight, const GlobalStats& stats, bool input_grad,
                                  BatchNormReducer& reducer) {
    const torch::Tensor x = input.to(stats_dtype(input));
    const torch::Tensor g = grad.to(x.scalar_type());
    const auto dims = reduced_dims(x);
    const torch::Tensor xmu = x - per_channel(stats.mean, x);
    const torch::Tensor sum_dy = g.sum(dims), sum_dy_xmu = (g * xmu).sum(dims);
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (weight.numel() > 0) {
      grad_weight = (sum_dy_xmu * stats.invstd).to(weight.scalar_type());
      grad_bias = sum_dy.to(weight.scalar_type());
    }
    if (input_grad) {  // the same collective on every rank: the same network
      torch::Tensor sums = torch::cat({sum_dy, sum_dy_xmu});
      reducer.all_reduce_sum(sums);
      const int64_t channels = x.size(1);
      const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / stats.count,
                          mean_dy_xmu = sums.narrow(0, channels, channels) / stats.count;
      const torch::Tensor& invstd = stats.invstd;
      const torch::Tensor scale = weight.numel() > 0 ? invstd * weight.to(x.scalar_type()) : invstd;
      // (g - mean_dy - xmu * invstd^2 * mean_dy_xmu) * scale, as two fused passes.
      grad_input = torch::addcmul(per_channel(-scale * mean_dy, x), xmu,
                                  per_channel(-scale * invstd * invstd * mean_dy_xmu, x));
      grad_input = grad_input.addcmul_(g, per_channel(scale, x)).to(input.scalar_type());
    }
    return {grad_input, grad_weight, grad_bias};
  }

  // The same with batch_norm_backward_reduce and batch_norm_backward_elemt. A rank with no images still
  // joins the all-reduce, with zeros.
  static Grads kernel_backward(const torch::Tensor& grad, const torch::Tensor& input,
                               const torch::Tensor& weight, const GlobalStats& stats, bool input_grad,
                               BatchNormReducer& reducer) {
    const int64_t channels = input.size(1);
    const bool affine = weight.numel() > 0;
    if (input.numel() == 0) {
      if (input_grad) {
        torch::Tensor zeros = torch::zeros({2 * channels}, stats.mean.options());
        reducer.all_reduce_sum(zeros);
      }
      return {torch::empty_like(input), affine ? torch::zeros_like(weight) : torch::Tensor(),
              affine ? torch::zeros_like(weight) : torch::Tensor()};
    }
    const torch::Tensor g = grad.contiguous(input.suggest_memory_format());
    auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] = at::batch_norm_backward_reduce(
        g, input, stats.mean, stats.invstd, optional(weight), input_grad, affine, affine);
    torch::Tensor grad_input;
    if (input_grad) {
      torch::Tensor sums = torch::cat({sum_dy, sum_dy_xmu});
      reducer.all_reduce_sum(sums);
      const std::optional<torch::Tensor> w =
          affine ? std::optional<torch::Tensor>(weight.to(stats.mean.scalar_type())) : std::nullopt;
      grad_input =
          at::batch_norm_backward_elemt(g, input, stats.mean, stats.invstd, w, sums.narrow(0, 0, channels),
                                        sums.narrow(0, channels, channels), stats.count);
    }
    return {grad_input, grad_weight, grad_bias};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight,
                              const torch::Tensor& bias, torch::Tensor running_mean,
                              torch::Tensor running_var, double momentum, double eps,
                              BatchNormReducer& reducer) {
  TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of (N, C, ...), got ", input.sizes());
  // A custom autograd function takes no undefined tensor: empty ones stand for a missing weight and bias
  // (affine=false) and for running statistics that are not kept.
  const auto none = [&](const torch::Tensor& t) {
    return t.defined() ? t : torch::empty({0}, input.options());
  };
  return SyncBatchNormFunction::apply(input, none(weight), none(bias), none(running_mean), none(running_var),
                                      momentum, eps, &reducer);
}

torch::Tensor SyncBatchNorm2dImpl::forward(const torch::Tensor& input) {
  if (!is_training() || !synchronised()) return torch::nn::BatchNorm2dImpl::forward(input);
  TORCH_CHECK(input.dim() == 4, "SyncBatchNorm2d: expected a 4-D input, got ", input.dim(), "-D");
  double factor = 0.0;  // as torch's BatchNorm: counted before the factor is taken from it
  if (options.track_running_stats()) {
    {
      torch::NoGradGuard no_grad;
      num_batches_tracked += 1;
    }
    factor = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
  }
  return sync_batch_norm(
      input, options.affine() ? weight : torch::Tensor(), options.affine() ? bias : torch::Tensor(),
      options.track_running_stats() ? running_mean : torch::Tensor(),
      options.track_running_stats() ? running_var : torch::Tensor(), factor, options.eps(), *reducer_);
}

int64_t set_batch_norm_sync(torch::nn::Module& module, const std::shared_ptr<BatchNormReducer>& reducer) {
  int64_t layers = 0;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (auto* sync = dynamic_cast<SyncBatchNorm2dImpl*>(m.get())) {
      sync->set_reducer(reducer);
      ++layers;
    } else {
      TORCH_CHECK(!dynamic_cast<torch::nn::BatchNorm1dImpl*>(m.get()) &&
                      !dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get()) &&
                      !dynamic_cast<torch::nn::BatchNorm3dImpl*>(m.get()),
                  "distributed.bn_sync: sync: the model has a BatchNorm (", m->name(),
                  ") that cannot be synchronised (not a SyncBatchNorm2d)");
    }
  }
  return layers;
}

}  // namespace ranzcr
