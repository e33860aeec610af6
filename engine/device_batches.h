// Batches on the training device. On CUDA the loader's pinned uint8 batches are copied on a side stream
// and turned into float there, one batch ahead, so the copy of batch k+1 overlaps the compute of batch
// k and the host never waits for the device. On a CPU the loader's float batches are used as they are.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>

#include "data/batch_loader.h"

namespace ranzcr {
namespace cuda {
class SideStream;
}

struct DeviceBatch {
  torch::Tensor images;   // [N, in_channels, S, S] float32 in [0, 1] on the device (NHWC with channels_last)
  torch::Tensor labels;   // [N, C] float32 on the device
  torch::Tensor indices;  // [N] int64 on the CPU: rows of the DatasetIndex
  int64_t skipped = 0;    // unreadable images left out (skip_bad_images)
  int64_t size() const { return images.size(0); }
};

struct DeviceBatchOptions {
  torch::Device device = torch::kCPU;
  int in_channels = 1;         // the single grey channel is repeated to this many
  bool channels_last = false;  // NHWC images (with a channels_last model)
};

/// LoaderOptions::uint8_images and pin_memory as `device` wants them (8-bit pinned batches for CUDA).
void set_loader_transfer(LoaderOptions& options, const torch::Device& device);

class DeviceBatches {
 public:
  /// Reads `loader` (which must outlive this object); on CUDA starts the first copy at once.
  DeviceBatches(BatchLoader& loader, DeviceBatchOptions options);
  ~DeviceBatches();
  DeviceBatches(const DeviceBatches&) = delete;
  DeviceBatches& operator=(const DeviceBatches&) = delete;

  /// The next batch, ready for use on the device's current stream; nullopt at the end.
  std::optional<DeviceBatch> next();

 private:
  DeviceBatch upload(Batch batch) const;
  std::optional<DeviceBatch> fetch();

  BatchLoader& loader_;
  DeviceBatchOptions options_;
  std::unique_ptr<cuda::SideStream> side_;
  std::optional<DeviceBatch> ahead_;  // CUDA: the batch whose copy is in flight
};

}  // namespace ranzcr
