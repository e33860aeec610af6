#include "engine/runtime/placement.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "core/check.h"
#include "engine/runtime/cuda_support.h"
#include "engine/runtime/precision.h"

namespace ranzcr {
namespace {

// Process-wide settings for fast kernels on `device` (cuDNN benchmark mode on CUDA).
void configure_device(const torch::Device& device) {
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);  // fixed shapes: pick the fastest conv
}

}  // namespace

int visible_gpus() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

torch::Device resolve_device(const DeviceSetting& setting, int local_rank, int local_world_size,
                             int visible_gpus, bool own_gpus) {
  using Kind = DeviceSetting::Kind;
  if (setting.kind == Kind::kCpu || (setting.kind == Kind::kAuto && visible_gpus == 0)) return torch::kCPU;
  const std::string key = "train.device " + setting_text(setting) + ": ";
  RANZCR_CHECK(visible_gpus > 0, key, "no CUDA GPU is visible to this process",
               cuda::compiled_with_cuda() ? "" : " (this binary's LibTorch has no CUDA)",
               "; use train.device cpu or auto");
  if (setting.index < 0)
    return torch::Device(torch::kCUDA,
                         static_cast<c10::DeviceIndex>(gpu_for_local_rank(local_rank, visible_gpus)));
  RANZCR_CHECK(setting.index < visible_gpus, key, "this process sees ", visible_gpus,
               " GPU(s), cuda:0 to cuda:", visible_gpus - 1);
  RANZCR_CHECK(
      local_world_size <= 1 || own_gpus, key, "the ", local_world_size,
      " ranks on this node would all use that one GPU; use train.device cuda (each rank its own GPU) or "
      "one process per node");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(setting.index));
}

Backend resolve_backend(BackendSetting setting, const torch::Device& device) {
  switch (setting) {
    case BackendSetting::kGloo:
      return Backend::kGloo;
    case BackendSetting::kNccl:
      return Backend::kNccl;
    case BackendSetting::kAuto:
      break;
  }
  return device.is_cuda() ? Backend::kNccl : Backend::kGloo;
}

Placement choose_placement(const Config& config, const WorldInfo& world, const EnvMap& env) {
  const int gpus = visible_gpus();
  const bool own = gpus_assigned_per_rank(env, world);
  Placement p;
  p.device = resolve_device(config.train.device, world.local_rank, world.local_world_size, gpus, own);
  if (world.launcher == Launcher::kSingle) return p;
  p.backend = resolve_backend(config.distributed.backend, p.device);
  if (*p.backend != Backend::kNccl) return p;
  RANZCR_CHECK(gpus > 0, "distributed.backend nccl needs GPUs; none is visible (use gloo or auto)");
  RANZCR_CHECK(nccl_available(),
               "distributed.backend nccl: this LibTorch was built without NCCL (use gloo or auto)");
  RANZCR_CHECK(!local_ranks_share_gpu(world.local_world_size, gpus, own), world.local_world_size,
               " ranks on this node share ", gpus,
               " visible GPU(s): NCCL refuses two ranks on one GPU (use at most one process per GPU, "
               "distributed.backend gloo, or train.device cpu)");
  return p;
}

Placement place_process(const Config& config, const WorldInfo& world, const EnvMap& env) {
  const Placement p = choose_placement(config, world, env);
  cuda::set_device(p.device);
  configure_device(p.device);
  return p;
}

int workers_per_node(const Config& config) {
  const ProcessCount& n = config.distributed.nproc_per_node;
  if (!n.automatic) return n.count;
  const DeviceSetting& d = config.train.device;
  return d.kind == DeviceSetting::Kind::kCpu || d.index >= 0 ? 1 : std::max(1, visible_gpus());
}

}  // namespace ranzcr
