// CUDA build of engine/runtime/cuda_support.h.
#include "engine/runtime/cuda_support.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace ranzcr::cuda {

bool compiled_with_cuda() {
  return true;
}

void set_device(const torch::Device& device) {
  if (device.is_cuda()) c10::cuda::set_device(device.has_index() ? device.index() : 0);
}

bool bf16_supported(const torch::Device& device) {
  if (!device.is_cuda()) return false;
  const auto* props = at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0);
  return props->major >= 8;
}

SyncDebugErrorGuard::SyncDebugErrorGuard()
    : previous_(static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode())) {
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}

SyncDebugErrorGuard::~SyncDebugErrorGuard() {
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(previous_));
}

namespace {

// One upload stream per device for the life of the process. A new pool stream per SideStream (one per
// epoch) would strand the caching allocator's blocks on the previous stream: blocks are reused only by
// allocations on the stream they were made on.
c10::cuda::CUDAStream upload_stream(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

}  // namespace

struct SideStream::Impl {
  explicit Impl(const torch::Device& d) : device(d), stream(upload_stream(d.index())) {}
  torch::Device device;
  c10::cuda::CUDAStream stream;
  c10::Event done{c10::DeviceType::CUDA};  // device-generic event: stable across LibTorch releases
};

SideStream::SideStream(const torch::Device& device) {
  if (!device.is_cuda() || !device.has_index())
    throw std::invalid_argument("SideStream needs a CUDA device with an index, got " + device.str());
  impl_ = std::make_unique<Impl>(device);
}

SideStream::~SideStream() = default;

void SideStream::run(const std::function<void()>& work) {
  c10::cuda::CUDAGuard device_guard(impl_->device);
  c10::cuda::CUDAStreamGuard stream_guard(impl_->stream);
  work();
  impl_->done.record(impl_->stream.unwrap());
}

void SideStream::hand_over(const std::vector<torch::Tensor>& tensors) {
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(impl_->device.index());
  impl_->done.block(current.unwrap());
  for (const auto& t : tensors)
    if (t.defined() && t.is_cuda()) t.record_stream(current);
}

}  // namespace ranzcr::cuda
