// CUDA-only facilities behind a plain C++ interface. Built from cuda_support.cpp when LibTorch has CUDA
// (RANZCR_WITH_CUDA), else from cuda_support_stub.cpp, so a CPU build never includes a CUDA header.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

namespace ranzcr::cuda {

/// True when this binary was built against a LibTorch with CUDA.
bool compiled_with_cuda();

/// Makes `device` this process's current CUDA device (c10::cuda::set_device), so that CUDA work without an
/// explicit device (NCCL, caching allocator, streams) lands on it. A no-op for a CPU device; throws for a
/// CUDA device when the binary has no CUDA.
void set_device(const torch::Device& device);

/// bf16 tensor cores on this GPU (compute capability 8.0 or newer).
bool bf16_supported(const torch::Device& device);

/// While alive, any host-device synchronisation on CUDA throws (torch.cuda.set_sync_debug_mode("error")).
/// Throws when the binary has no CUDA.
class SyncDebugErrorGuard {
 public:
  SyncDebugErrorGuard();
  ~SyncDebugErrorGuard();
  SyncDebugErrorGuard(const SyncDebugErrorGuard&) = delete;
  SyncDebugErrorGuard& operator=(const SyncDebugErrorGuard&) = delete;

 private:
  int previous_ = 0;
};

/// A side stream for host-to-device copies that overlap the compute on the current stream. Every
/// SideStream of a device uses the same CUDA stream (made once per process), so the caching allocator
/// reuses the blocks of earlier uploads.
class SideStream {
 public:
  /// Throws when `device` is not a CUDA device or the binary has no CUDA.
  explicit SideStream(const torch::Device& device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  /// Runs `work` (copies, conversions) with the side stream current, then records an event after it.
  void run(const std::function<void()>& work);
  /// Makes the device's current stream wait for the last run() and tells the caching allocator that
  /// `tensors` (made on the side stream) are used on the current stream. Never blocks the host.
  void hand_over(const std::vector<torch::Tensor>& tensors);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ranzcr::cuda
