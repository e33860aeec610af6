#include "engine/infer/inference.h"

#include "data/batch_loader.h"
#include "data/sampler.h"
#include "engine/runtime/device_batches.h"

namespace ranzcr {

InferenceResult run_inference(Classifier& model, const DatasetIndex& index, const std::vector<int64_t>& rows,
                              const InferenceOptions& options, Collectives& collectives) {
  SamplerOptions so;
  so.rank = collectives.rank();
  so.world_size = collectives.world_size();
  so.shuffle = false;
  so.pad = false;
  const std::vector<int64_t> positions = DistributedSampler(rows.size(), so).indices();
  std::vector<int64_t> my_rows;
  for (int64_t p : positions) my_rows.push_back(rows[p]);

  TransformOptions to;
  to.image_size = options.image_size;
  to.train = false;
  to.augment.clahe = options.clahe;
  LoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.num_workers = options.num_workers;
  lo.prefetch_batches = options.prefetch_batches;
  lo.skip_bad_images = options.skip_bad_images;
  set_loader_transfer(lo, options.device);
  BatchLoader loader(index, my_rows, ImageTransform(to), /*epoch=*/0, lo);
  DeviceBatchOptions dbo;
  dbo.device = options.device;
  dbo.in_channels = options.in_channels;
  dbo.input_mean = options.input_mean;
  dbo.input_std = options.input_std;
  dbo.channels_last = options.channels_last;
  DeviceBatches batches(loader, dbo);

  const int64_t c = static_cast<int64_t>(index.num_labels());
  std::vector<torch::Tensor> logits, labels, got_rows;  // device tensors: one copy to the host at the end
  int64_t skipped = 0;
  const bool was_training = model.is_training();
  model.eval();
  {
    torch::NoGradGuard no_grad;
    while (auto batch = batches.next()) {
      skipped += batch->skipped;
      if (batch->size() == 0) continue;
      const torch::Tensor& x = batch->images;
      Autocast autocast(options.device, options.precision);
      torch::Tensor out = model.forward(x).to(torch::kFloat32);
      if (options.tta_hflip) out = 0.5 * (out + model.forward(x.flip({3})).to(torch::kFloat32));
      logits.push_back(out);
      labels.push_back(batch->labels);
      got_rows.push_back(batch->indices);
    }
  }
  model.train(was_training);
  auto cat = [](std::vector<torch::Tensor>& parts, torch::Tensor empty) {
    return parts.empty() ? empty : torch::cat(parts, 0);
  };
  const bool labeled = !index.labels.empty();
  InferenceResult local;
  local.logits = cat(logits, torch::zeros({0, c})).to(torch::kCPU);
  local.labels = cat(labels, torch::zeros({0, labeled ? c : 0})).to(torch::kCPU);
  local.rows = cat(got_rows, torch::zeros({0}, torch::kLong));

  // One gather of everything; then back into the order of `rows`.
  InferenceResult all;
  all.logits = collectives.all_gather_cat(local.logits);
  all.labels = collectives.all_gather_cat(local.labels);
  all.rows = collectives.all_gather_cat(local.rows);
  torch::Tensor skipped_t = torch::tensor({skipped}, torch::kLong);
  collectives.all_reduce_sum(skipped_t);
  all.skipped = skipped_t.item<int64_t>();
  if (collectives.world_size() > 1) {
    std::unordered_map<int64_t, int64_t> position;
    for (size_t i = 0; i < rows.size(); ++i) position.emplace(rows[i], static_cast<int64_t>(i));
    torch::Tensor key = torch::empty_like(all.rows);
    const int64_t* got = all.rows.data_ptr<int64_t>();
    int64_t* k = key.data_ptr<int64_t>();
    for (int64_t i = 0; i < all.rows.size(0); ++i) k[i] = position.at(got[i]);
    const torch::Tensor order = key.argsort();
    all.logits = all.logits.index_select(0, order);
    all.labels = all.labels.index_select(0, order);
    all.rows = all.rows.index_select(0, order);
  }
  return all;
}

InferenceOptions inference_options(const Config& config, torch::Device device, bool tta) {
  InferenceOptions io;
  io.image_size = config.data.image_size;
  io.clahe = config.data.augment.clahe;
  io.batch_size = config.train.eval_batch_size;
  io.num_workers = config.data.num_workers;
  io.prefetch_batches = config.data.prefetch_batches;
  io.skip_bad_images = config.data.skip_bad_images;
  io.tta_hflip = tta || config.train.tta_hflip;
  io.in_channels = config.model.in_channels;
  io.input_mean = config.model.input_mean;
  io.input_std = config.model.input_std;
  io.device = device;
  io.precision = resolve_precision(config.train.precision, device);
  io.channels_last = resolve_channels_last(config.train.channels_last, device);
  return io;
}

}  // namespace ranzcr
