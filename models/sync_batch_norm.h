// BatchNorm2d whose training statistics can be computed over every rank of a job (distributed.bn_sync: sync),
// as PyTorch's SyncBatchNorm does: the zoo's models and the auxiliary head build their BatchNorms with it.
// Until set_batch_norm_sync gives it the job's collectives, and always in evaluation mode, it is torch's
// BatchNorm2d (the same forward, parameters, buffers and state-dict names: checkpoints are the same with and
// without).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>

namespace ranzcr {

/// The two collectives synchronised BatchNorm needs, over the job's ranks (distributed/'s Collectives has
/// both; models/ does not depend on distributed/). Every rank calls them in the same order.
class BatchNormReducer {
 public:
  virtual ~BatchNormReducer() = default;
  virtual int world_size() const = 0;
  /// Each rank's `tensor` (the same shape on every rank), stacked along a new dim 0 in rank order.
  virtual torch::Tensor all_gather_stack(const torch::Tensor& tensor) = 0;
  /// Sums `tensor` over the ranks, in place.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
};

/// Synchronised batch normalisation of `input` (N, C, ...) over the ranks of `reducer`, in training:
/// - forward: each rank's count, mean and sum of squared deviations (float32 at least, whatever the input's
///   dtype) gathered in one collective and merged as Chan's parallel Welford update, so that ranks with
///   different counts (a short last batch, an empty one) are weighted by their counts; `running_mean` and
///   `running_var` (unbiased, from the global count) updated as one process with the global batch would;
/// - backward: the sums of the gradient and of gradient times (x - mean) in one all-reduce; the input's
///   gradient from the global sums, the weight's and bias's from this rank's (DDP then averages them).
/// `momentum`: the running statistics' update factor (the module passes 1/num_batches_tracked for PyTorch's
/// momentum=None). `weight`/`bias` may be undefined (affine=false), and so may the running statistics
/// (track_running_stats=false). Nothing is read back to the host: no wait for the device. (The module, with
/// momentum=None only, reads num_batches_tracked for the factor, as torch's BatchNorm does; the zoo's use
/// 0.1.)
torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight,
                              const torch::Tensor& bias, torch::Tensor running_mean,
                              torch::Tensor running_var, double momentum, double eps,
                              BatchNormReducer& reducer);

class SyncBatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  /// Training with a reducer of two or more ranks: sync_batch_norm; otherwise torch's BatchNorm2d.
  torch::Tensor forward(const torch::Tensor& input);
  /// Synchronise over `reducer` from now on (nullptr: not any more).
  void set_reducer(std::shared_ptr<BatchNormReducer> reducer) { reducer_ = std::move(reducer); }
  bool synchronised() const { return reducer_ && reducer_->world_size() > 1; }

 private:
  std::shared_ptr<BatchNormReducer> reducer_;
};
TORCH_MODULE(SyncBatchNorm2d);

/// Gives every SyncBatchNorm2d of `module` (itself included) `reducer`; the number of layers. Throws when
/// `module` holds a BatchNorm of another type, which would stay unsynchronised.
int64_t set_batch_norm_sync(torch::nn::Module& module, const std::shared_ptr<BatchNormReducer>& reducer);

}  // namespace ranzcr
