// Joining a multi-process job: rendezvous store (TCPStore / FileStore, torchrun's agent store), then a
// Gloo (CPU) or NCCL (CUDA) backend behind the Collectives interface.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "distributed/collectives.h"
#include "distributed/init_method.h"
#include "distributed/world.h"

namespace ranzcr {

/// The collective backend of a process group: Gloo (CPU tensors) or NCCL (CUDA tensors, one GPU per rank).
enum class Backend { kGloo, kNccl };
/// "gloo" or "nccl".
const char* backend_name(Backend backend);

struct ProcessGroupOptions {
  Backend backend = Backend::kGloo;
  InitMethod init_method;                         // env:// | tcp://host:port | file:///path
  std::chrono::milliseconds timeout{300 * 1000};  // rendezvous and collectives
  torch::Device device = torch::kCPU;             // NCCL: this rank's GPU
};

/// Joins the job: every rank must call it. Throws std::runtime_error with one clear line when the store
/// cannot be hosted or reached, or when not every rank joins within the timeout (naming how many did).
std::shared_ptr<Collectives> init_process_group(const WorldInfo& world, const ProcessGroupOptions& options);

/// Whether this LibTorch was built with NCCL.
bool nccl_available();
/// NCCL's version ("" without NCCL).
std::string nccl_version();

}  // namespace ranzcr
