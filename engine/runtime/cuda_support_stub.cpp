// CPU build of engine/runtime/cuda_support.h: nothing CUDA exists, so asking for it is an error.
#include "engine/runtime/cuda_support.h"

#include "core/check.h"

namespace ranzcr::cuda {
namespace {

[[noreturn]] void no_cuda(const std::string& what) {
  RANZCR_FAIL(what, ": this binary was built against a LibTorch without CUDA");
}

}  // namespace

bool compiled_with_cuda() {
  return false;
}

void set_device(const torch::Device& device) {
  if (device.is_cuda()) no_cuda("CUDA device " + device.str());
}

bool bf16_supported(const torch::Device&) {
  return false;
}

SyncDebugErrorGuard::SyncDebugErrorGuard() {
  no_cuda("CUDA sync-debug mode");
}

SyncDebugErrorGuard::~SyncDebugErrorGuard() = default;

struct SideStream::Impl {};

SideStream::SideStream(const torch::Device&) {
  no_cuda("CUDA side stream");
}

SideStream::~SideStream() = default;

void SideStream::run(const std::function<void()>&) {
  no_cuda("CUDA side stream");
}

void SideStream::hand_over(const std::vector<torch::Tensor>&) {
  no_cuda("CUDA side stream");
}

}  // namespace ranzcr::cuda
