// Data-parallel gradient synchronisation (what PyTorch's DistributedDataParallel does), for any
// torch::nn::Module: parameters and buffers broadcast from rank 0 at construction; gradients grouped in
// buckets (reverse parameter order, ~25 MiB) and each bucket's async all-reduce launched from the
// autograd engine as soon as its last gradient is accumulated, overlapping the rest of backward.
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "distributed/collectives.h"

namespace ranzcr {

struct DdpOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;  // gradient bucket capacity
  bool broadcast_buffers = true;            // BatchNorm statistics from rank 0 before every forward
  bool sync_alone = false;  // communicate even in a world of one (tests: NCCL with a single GPU)
};

class DistributedDataParallel {
 public:
  /// Broadcasts `module`'s parameters and buffers from rank 0 and installs the gradient hooks.
  /// With one process every call below is a no-op (unless options.sync_alone).
  DistributedDataParallel(torch::nn::Module& module, Collectives& collectives, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Call before each training forward: broadcasts buffers from rank 0 (when configured).
  void before_forward();
  /// false for gradient-accumulation micro-steps (no communication, gradients accumulate locally);
  /// true (the default) for the backward that precedes an optimizer step.
  void set_require_sync(bool sync);
  /// Call with the loss right before backward on a sync step: parameters the loss does not depend on
  /// (found by walking its autograd graph, like PyTorch's find_unused_parameters) are marked ready at
  /// once, so their buckets do not wait for a gradient that never comes and overlap is kept.
  void prepare_backward(const torch::Tensor& loss);
  /// Call after backward on a sync step: launches the buckets backward did not (parameters without a
  /// gradient contribute zeros), waits for all, and leaves every gradient averaged over the ranks. A
  /// parameter that no rank used (outside every rank's graph at prepare_backward, and no gradient
  /// accumulated by an earlier micro-step) stays without a gradient, as PyTorch's DDP leaves it None:
  /// AdamW then skips it, no weight decay.
  void finish_gradient_sync();
  /// Averages buffers (BatchNorm running statistics) over the ranks.
  void average_buffers();

  int64_t num_buckets() const;
  /// Seconds the host spent in finish_gradient_sync (launching the remaining buckets and waiting for
  /// all) since construction. With Gloo that is the exposed communication; with NCCL, wait() does not
  /// block the host, so this measures only the launch.
  double sync_wait_seconds() const;
  /// Buckets launched from inside the last backward (before it returned): the overlap, instrumented.
  int64_t launched_during_backward() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

/// Broadcasts `tensors` from `root` with one collective per dtype (flattened), in place.
void broadcast_coalesced(Collectives& collectives, const std::vector<torch::Tensor>& tensors, int root);

}  // namespace ranzcr
