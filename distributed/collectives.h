// The thin collectives API the trainer calls. One process: every call is a no-op or an identity.
// The multi-process implementation (c10d process groups) plugs in behind the same interface.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>

namespace ranzcr {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_main() const { return rank() == 0; }
  /// Sums `tensor` over all ranks, in place.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  /// Concatenates each rank's `tensor` along dim 0 in rank order; sizes along dim 0 may differ.
  virtual torch::Tensor all_gather_cat(const torch::Tensor& tensor) = 0;
  /// Stacks each rank's `tensor` (the same shape and dtype on every rank) along a new dim 0 in rank order:
  /// one collective and no read on the host, unlike all_gather_cat, which first exchanges the sizes.
  virtual torch::Tensor all_gather_stack(const torch::Tensor& tensor) {
    return all_gather_cat(tensor.unsqueeze(0));
  }
  /// Copies `tensor` from `root` to every rank, in place.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  /// Returns when every rank has called it.
  virtual void barrier() = 0;

  /// An all-reduce in flight; wait() returns when `tensor` holds the sum.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  /// Starts summing `tensor` over all ranks in place; the tensor must stay alive until wait().
  virtual std::unique_ptr<Pending> all_reduce_sum_async(torch::Tensor& tensor);
  /// Backend name ("local", "gloo", "nccl").
  virtual std::string backend() const { return "local"; }
  /// How this rank reaches its peers, for the start-up line: "gloo address 10.0.0.2 (route to master)";
  /// empty when there is nothing to say (one process, NCCL).
  virtual std::string transport() const { return ""; }
  /// Ends the job's communication cleanly (every rank calls it once at exit).
  virtual void shutdown() {}
};

/// Collectives for a single process: rank 0 of 1.
std::shared_ptr<Collectives> make_local_collectives();

}  // namespace ranzcr
