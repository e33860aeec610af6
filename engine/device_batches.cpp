#include "engine/device_batches.h"

#include "engine/cuda_support.h"

namespace ranzcr {

void set_loader_transfer(LoaderOptions& options, const torch::Device& device) {
  options.pin_memory = device.is_cuda();
  options.uint8_images = device.is_cuda();
}

DeviceBatches::DeviceBatches(BatchLoader& loader, DeviceBatchOptions options)
    : loader_(loader), options_(options) {
  if (options_.device.is_cuda()) {
    side_ = std::make_unique<cuda::SideStream>(options_.device);
    ahead_ = fetch();
  }
}

DeviceBatches::~DeviceBatches() = default;

DeviceBatch DeviceBatches::upload(Batch batch) const {
  DeviceBatch out;
  out.indices = batch.indices;
  out.skipped = batch.skipped;
  const bool u8 = batch.images.scalar_type() == torch::kUInt8;
  torch::Tensor x = batch.images.to(options_.device, /*non_blocking=*/true);
  if (u8)
    x = normalize_images(x, batch.pixel_scale.to(options_.device, true),
                         batch.pixel_offset.to(options_.device, true));
  if (options_.in_channels != 1) x = x.expand({-1, options_.in_channels, -1, -1}).contiguous();
  if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  out.images = x;
  out.labels = batch.labels.to(options_.device, /*non_blocking=*/true);
  return out;
}

std::optional<DeviceBatch> DeviceBatches::fetch() {
  std::optional<Batch> batch = loader_.next();
  if (!batch) return std::nullopt;
  if (!side_) return upload(std::move(*batch));
  DeviceBatch out;
  side_->run([&] { out = upload(std::move(*batch)); });
  return out;
}

std::optional<DeviceBatch> DeviceBatches::next() {
  if (!side_) return fetch();
  std::optional<DeviceBatch> current = std::move(ahead_);
  if (!current) return std::nullopt;
  side_->hand_over({current->images, current->labels});
  ahead_ = fetch();  // the next copy runs while the caller computes on `current`
  return current;
}

}  // namespace ranzcr
