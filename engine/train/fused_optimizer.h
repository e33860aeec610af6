// AdamW and SGD that step every parameter at once. LibTorch's torch::optim::AdamW and SGD loop over the
// parameters and launch about eight kernels each; on resnet200d or an EfficientNet that is thousands of
// tiny launches per step. These subclasses run PyTorch's fused kernels instead (at::_fused_adamw_,
// at::_fused_sgd_: one multi-tensor launch per step on CUDA, one vectorised pass per tensor on a CPU),
// as torch.optim does with fused=True. They keep LibTorch's state objects (exp_avg, exp_avg_sq and step;
// momentum_buffer), so a checkpoint is that of torch::optim::AdamW/SGD and either reads it.
//
// A step can be skipped on the device: step_unless(found_inf) with fp16's inf/NaN flag changes nothing
// where the flag is 1, without the host reading it (no sync), as GradScaler does with fused optimizers.
// Where no fused kernel applies (a device other than CPU/CUDA, a non-float dtype, parameters on several
// devices or dtypes, sparse gradients, SGD with dampening, AdamW with amsgrad) the step is LibTorch's own
// per-parameter one, and a skip reads the flag on the host.
#pragma once

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/config/config.h"
#include "models/registry.h"

namespace ranzcr {

/// An optimizer whose step can be skipped by a flag on the device.
class SkippableStep {
 public:
  virtual ~SkippableStep() = default;
  /// One optimizer step, none of which happens where `found_inf` ([1] or [] float32 0/1 on the
  /// parameters' device; undefined = never skip) is 1.
  virtual void step_unless(const torch::Tensor& found_inf) = 0;
  /// Whether the last step ran the fused kernel (false: LibTorch's per-parameter step).
  virtual bool last_step_fused() const = 0;
};

/// What FusedAdamW and FusedSgd share: LibTorch's optimizer `Base` (with its `Options`) whose step runs the
/// fused kernel where it applies, else Base's own per-parameter step. A subclass says which options the
/// kernel takes and runs it over one parameter group.
template <class Base, class Options>
class FusedOptimizer : public Base, public SkippableStep {
 public:
  using LossClosure = torch::optim::Optimizer::LossClosure;

  /// `fused` false: always LibTorch's per-parameter step (a reference, and a way out).
  FusedOptimizer(std::vector<torch::Tensor> params, Options options, bool fused);

  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_unless(const torch::Tensor& found_inf) override;
  bool last_step_fused() const override { return last_fused_; }

 protected:
  /// Whether the fused kernel computes what Base's step would with a group's `options`.
  virtual bool kernel_takes(const Options& options) const = 0;
  /// The fused kernel over `group`'s parameters that have gradients (see step_unless for `found_inf`).
  virtual void fused_group_step(torch::optim::OptimizerParamGroup& group, const Options& options,
                                const torch::Tensor& found_inf) = 0;
  /// Called before each of Base's per-parameter steps.
  virtual void before_per_parameter_step() {}

  /// The LibTorch state of `p`, created by `init` (as Base's step would create it) where it has none yet.
  template <class State, class Init>
  State& state_of(const torch::Tensor& p, Init init) {
    auto& slot = this->state_[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto s = std::make_unique<State>();
      init(*s);
      slot = std::move(s);
    }
    return static_cast<State&>(*slot);
  }

 private:
  bool fused_step(const torch::Tensor& found_inf);

  bool fused_ = true;
  bool last_fused_ = false;
};

class FusedAdamW : public FusedOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions> {
 public:
  FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options, bool fused = true);

  /// Writes the step counts kept on the device into LibTorch's state first.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  bool kernel_takes(const torch::optim::AdamWOptions& options) const override;
  void fused_group_step(torch::optim::OptimizerParamGroup& group, const torch::optim::AdamWOptions& options,
                        const torch::Tensor& found_inf) override;
  void before_per_parameter_step() override;
  void sync_steps() const;

  // Per parameter (keyed like LibTorch's state): its step count, float32 [] on its device, which the
  // fused kernel reads and a skipped step leaves unchanged. Authoritative while not empty.
  std::unordered_map<void*, torch::Tensor> steps_;
};

class FusedSgd : public FusedOptimizer<torch::optim::SGD, torch::optim::SGDOptions> {
 public:
  FusedSgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options, bool fused = true);

 private:
  bool kernel_takes(const torch::optim::SGDOptions& options) const override;
  void fused_group_step(torch::optim::OptimizerParamGroup& group, const torch::optim::SGDOptions& options,
                        const torch::Tensor& found_inf) override;
};

/// `a` and `b` lay their elements out alike: the same sizes, and the same strides over every dimension larger
/// than 1 (a size-1 dimension's stride never moves a pointer; ATen's ForeachUtils ignores it too). A 1x1
/// convolution's channels_last gradient from cuDNN, strides (I, 1, I, I), is laid out as its contiguous
/// weight, (I, 1, 1, 1).
bool same_layout(const torch::Tensor& a, const torch::Tensor& b);

/// `t` laid out as `like` (same_layout; a copy when it is not, or when it is on another device): the fused
/// kernels need the parameters, gradients and state in one layout (channels_last parameters after a
/// resume, say).
torch::Tensor in_layout_of(const torch::Tensor& t, const torch::Tensor& like);

/// AdamW or SGD (Nesterov) over `parameters`, per optim.* (optim.fused: the fused kernels or LibTorch's
/// per-parameter step).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        std::vector<torch::Tensor> parameters);
/// The same over `model`'s parameters.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, Classifier& model);

}  // namespace ranzcr
