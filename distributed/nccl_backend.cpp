// NCCL lives in its own translation unit, compiled only when LibTorch has it (USE_C10D_NCCL).
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <stdexcept>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ranzcr {

bool nccl_available() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#ifdef USE_C10D_NCCL
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    const torch::Device& device) {
#ifdef USE_C10D_NCCL
  if (!device.is_cuda() || !device.has_index())
    throw std::runtime_error("the NCCL backend needs a CUDA device with an index, got " + device.str());
  c10::cuda::set_device(device.index());  // before anything else touches NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  pg->setBoundDeviceId(device);
  return pg;
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)device;
  throw std::runtime_error("distributed.backend nccl: this LibTorch was built without NCCL (use gloo)");
#endif
}

}  // namespace ranzcr
