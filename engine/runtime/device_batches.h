// Batches on the training device. On CUDA the loader's pinned uint8 batches are copied on a side stream
// and turned into float there, one batch ahead, so the copy of batch k+1 overlaps the compute of batch
// k and the host never waits for the device. On a CPU the loader's float batches are used as they are.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "data/batch_loader.h"
#include "engine/config/config.h"

namespace ranzcr {
namespace cuda {
class SideStream;
}

struct DeviceBatch {
  torch::Tensor images;  // [N, in_channels, S, S] float32 on the device (NHWC with channels_last): the pixels
                         // in [0, 1], normalised with input_mean/input_std
  torch::Tensor labels;  // [N, C] float32 on the device
  torch::Tensor indices;         // [N] int64 on the CPU: rows of the DatasetIndex
  torch::Tensor masks;           // with the loader's annotations: [N, 1, S, S] uint8 0/1 on the device
  torch::Tensor has_annotation;  // with the loader's annotations: [N] float32 0/1 on the device
  int64_t skipped = 0;           // unreadable images left out (skip_bad_images)
  int64_t size() const { return images.size(0); }
};

struct DeviceBatchOptions {
  torch::Device device = torch::kCPU;
  int in_channels = 1;                  // the single grey channel is repeated to this many
  bool channels_last = false;           // NHWC images (with a channels_last model)
  std::vector<double> input_mean{0.0};  // (pixel - mean) / std per channel (one value: every channel)
  std::vector<double> input_std{1.0};
};

/// The float images of a uint8 batch (Batch::images with pixel_scale and pixel_offset, data/batch_loader.h):
/// clamp(u8 * scale + offset, 0, 1) per image, on the tensors' device (the GPU, after the 8-bit copy).
/// Float batches are returned as they are. [N, 1, S, S] uint8, [N], [N] -> [N, 1, S, S] float32.
torch::Tensor normalize_images(const torch::Tensor& images, const torch::Tensor& scale,
                               const torch::Tensor& offset);

/// (images - mean) / std per channel: [N, 1 or C, S, S] float with mean/std of 1 or C values -> [N, C', S, S]
/// (C' = the largest of the three). The identity (0, 1) returns `images` as it is.
torch::Tensor normalize_input(const torch::Tensor& images, const std::vector<double>& mean,
                              const std::vector<double>& std);

/// A loader's batch on `options.device` as DeviceBatches hands it over (8-bit images made float, normalised,
/// channels repeated, the layout set), copied on the current stream.
DeviceBatch upload_batch(Batch batch, const DeviceBatchOptions& options);

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

/// The training loader's options (batch, threads, prefetch, bad images, transfer format for `device`).
LoaderOptions train_loader_options(const Config& config, const torch::Device& device, bool drop_last);

}  // namespace ranzcr
