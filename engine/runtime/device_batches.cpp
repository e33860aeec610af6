#include "engine/runtime/device_batches.h"

#include <algorithm>

#include "engine/runtime/cuda_support.h"
#include "engine/runtime/precision.h"

namespace ranzcr {

torch::Tensor normalize_images(const torch::Tensor& images, const torch::Tensor& scale,
                               const torch::Tensor& offset) {
  if (images.scalar_type() != torch::kUInt8) return images;
  return (images.to(torch::kFloat32) * scale.view({-1, 1, 1, 1}) + offset.view({-1, 1, 1, 1}))
      .clamp_(0.0, 1.0);
}

void set_loader_transfer(LoaderOptions& options, const torch::Device& device) {
  options.pin_memory = device.is_cuda();
  options.uint8_images = device.is_cuda();
}

torch::Tensor normalize_input(const torch::Tensor& images, const std::vector<double>& mean,
                              const std::vector<double>& std) {
  auto all = [](const std::vector<double>& v, double x) {
    return std::all_of(v.begin(), v.end(), [x](double e) { return e == x; });
  };
  if (all(mean, 0.0) && all(std, 1.0)) return images;
  // Scalar arithmetic per channel: no host-to-device copy of the constants (that would synchronise).
  const size_t channels = std::max({mean.size(), std.size(), static_cast<size_t>(images.size(1))});
  std::vector<torch::Tensor> out;
  for (size_t c = 0; c < channels; ++c) {
    const int64_t from = std::min<int64_t>(static_cast<int64_t>(c), images.size(1) - 1);
    out.push_back(images.narrow(1, from, 1)
                      .sub(mean[std::min(c, mean.size() - 1)])
                      .div(std[std::min(c, std.size() - 1)]));
  }
  return channels == 1 ? out[0] : torch::cat(out, 1);
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
  return upload_batch(std::move(batch), options_);
}

DeviceBatch upload_batch(Batch batch, const DeviceBatchOptions& options_) {
  DeviceBatch out;
  out.indices = batch.indices;
  out.skipped = batch.skipped;
  const bool u8 = batch.images.scalar_type() == torch::kUInt8;
  torch::Tensor x = batch.images.to(options_.device, /*non_blocking=*/true);
  if (u8)
    x = normalize_images(x, batch.pixel_scale.to(options_.device, true),
                         batch.pixel_offset.to(options_.device, true));
  x = normalize_input(x, options_.input_mean, options_.input_std);
  // One copy at most: repeating the grey channel and the NHWC layout in the same pass.
  const auto format =
      options_.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  if (x.size(1) != options_.in_channels) x = x.expand({-1, options_.in_channels, -1, -1});
  x = in_memory_format(x, format);  // a 1-channel batch gets NHWC strides (no copy): see precision.h
  out.images = x;
  out.labels = batch.labels.to(options_.device, /*non_blocking=*/true);
  if (batch.masks.defined()) {
    out.masks = batch.masks.to(options_.device, /*non_blocking=*/true);
    out.has_annotation = batch.has_annotation.to(options_.device, /*non_blocking=*/true);
  }
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
  std::vector<torch::Tensor> tensors = {current->images, current->labels};
  if (current->masks.defined()) tensors.insert(tensors.end(), {current->masks, current->has_annotation});
  side_->hand_over(tensors);
  ahead_ = fetch();  // the next copy runs while the caller computes on `current`
  return current;
}

LoaderOptions train_loader_options(const Config& config, const torch::Device& device, bool drop_last) {
  LoaderOptions lo;
  lo.batch_size = config.train.batch_size;
  lo.num_workers = config.data.num_workers;
  lo.prefetch_batches = config.data.prefetch_batches;
  lo.skip_bad_images = config.data.skip_bad_images;
  lo.drop_last = drop_last;
  set_loader_transfer(lo, device);
  return lo;
}

}  // namespace ranzcr
