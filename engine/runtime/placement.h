// Where a process runs: the one owner of device choice and placement. train.device (typed when the
// config was read) becomes this rank's device, distributed.backend its backend, ranks that would share a
// GPU are refused with one line, and the process is settled on its device (the current CUDA device,
// process-wide kernel settings) once, by run_job (apps/processes.cpp), before any job body runs.
#pragma once

#include <torch/types.h>

#include <optional>

#include "distributed/process_group.h"
#include "distributed/world.h"
#include "engine/config/config.h"

namespace ranzcr {

/// The GPUs this process sees (0 without CUDA).
int visible_gpus();

/// train.device for local rank `local_rank` of the `local_world_size` ranks on its node, which sees
/// `visible_gpus` GPUs; `own_gpus`: each rank of the node was given GPUs of its own
/// (gpus_assigned_per_rank). auto: the rank's GPU (gpu_for_local_rank) when it sees one, else the CPU;
/// cpu; cuda: the rank's GPU; cuda:N: GPU N. Throws std::runtime_error naming train.device for cuda or
/// cuda:N without a GPU, N not below `visible_gpus`, and cuda:N that several ranks of the node would share.
torch::Device resolve_device(const DeviceSetting& setting, int local_rank, int local_world_size,
                             int visible_gpus, bool own_gpus);

/// distributed.backend for a rank on `device`: auto is NCCL on a CUDA device, else Gloo.
Backend resolve_backend(BackendSetting setting, const torch::Device& device);

struct Placement {
  torch::Device device = torch::kCPU;
  std::optional<Backend> backend;  // none for a single process (no process group)
};

/// Where a process of `world` runs, checked: train.device and, in a process group, the backend. Throws
/// one clear line when they cannot work here: cuda without a GPU, cuda:N out of range or shared, NCCL
/// without GPUs or without NCCL, or with ranks truly sharing a GPU (more ranks on the node than GPUs,
/// unless each rank was given its own: srun --gpus-per-task, CUDA_VISIBLE_DEVICES per rank). Sets nothing.
Placement choose_placement(const Config& config, const WorldInfo& world, const EnvMap& env);

/// choose_placement, then settles this process there: the current CUDA device (before any CUDA
/// allocation) and process-wide kernel settings (cuDNN benchmark mode on CUDA). Once per process.
Placement place_process(const Config& config, const WorldInfo& world, const EnvMap& env);

/// distributed.nproc_per_node on this node: the count, or auto: one per visible GPU (one process when
/// train.device is cpu or one GPU, cuda:N, or when no GPU is visible).
int workers_per_node(const Config& config);

}  // namespace ranzcr
