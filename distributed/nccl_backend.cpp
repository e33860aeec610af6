// NCCL lives in its own translation unit, compiled only when LibTorch has it (USE_C10D_NCCL).
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/check.h"

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdio>
#include <map>
#endif

namespace ranzcr {

#ifdef USE_C10D_NCCL
namespace {

// The GPU's UUID ("GPU-xxxxxxxx-..."; one per physical GPU, whatever CUDA_VISIBLE_DEVICES calls it).
std::string gpu_uuid(const torch::Device& device) {
  cudaDeviceProp prop{};
  RANZCR_CHECK(cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess,
               "cannot read the properties of ", device.str());
  std::string uuid = "GPU";
  for (int i = 0; i < 16; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    uuid += (i == 0 || i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "") + std::string(hex);
  }
  return uuid;
}

// Two ranks on one GPU are refused on every rank with one line, through the store, before NCCL would
// refuse them with its own "Duplicate GPU detected": a rank cannot tell from its environment whether a
// CUDA_VISIBLE_DEVICES that torchrun or a wrapper passed on was set for it alone or for the whole job.
void check_one_rank_per_gpu(c10d::Store& store, int rank, int size, const torch::Device& device) {
  const std::string mine = gpu_uuid(device);
  store.set("gpu/" + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::map<std::string, int> first_rank;  // GPU -> the first rank on it
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> v = store.get("gpu/" + std::to_string(r));
    const auto [it, alone] = first_rank.emplace(std::string(v.begin(), v.end()), r);
    RANZCR_CHECK(
        alone, "ranks ", it->second, " and ", r, " of the job use the same GPU (", it->first,
        "): NCCL refuses two ranks on one GPU. Run at most one process per GPU (under torchrun "
        "--nproc-per-node the GPU count, without a CUDA_VISIBLE_DEVICES that lists fewer GPUs), give "
        "each rank its own GPU, or use distributed.backend gloo");
  }
}

}  // namespace
#endif

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
  RANZCR_CHECK(device.is_cuda() && device.has_index(),
               "the NCCL backend needs a CUDA device with an index, got ", device.str());
  c10::cuda::set_device(device.index());  // before anything else touches NCCL
  check_one_rank_per_gpu(*store, rank, size, device);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  pg->setBoundDeviceId(device);
  return pg;
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)device;
  RANZCR_FAIL("distributed.backend nccl: this LibTorch was built without NCCL (use gloo)");
#endif
}

}  // namespace ranzcr
