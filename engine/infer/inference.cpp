#include "engine/infer/inference.h"

#include <memory>
#include <unordered_map>

#include "data/batch_loader.h"
#include "data/sampler.h"
#include "engine/runtime/device_batches.h"

namespace ranzcr {

std::vector<int64_t> rows_of_rank(const std::vector<int64_t>& rows, Collectives& collectives) {
  SamplerOptions so;
  so.rank = collectives.rank();
  so.world_size = collectives.world_size();
  so.shuffle = false;
  so.pad = false;
  std::vector<int64_t> mine;
  for (int64_t p : DistributedSampler(rows.size(), so).indices()) mine.push_back(rows[p]);
  return mine;
}

namespace {

// The cache to read `index`'s images from under `options`, or nullptr: evaluate and predict never build
// one (they read each image once), they use the one a training run on the same images built.
std::shared_ptr<const CachedImages> cached_images(const DatasetIndex& index, const PrepareOptions& prepare,
                                                  const InferenceOptions& options) {
  if (const auto& c = options.cache;
      c && c->cache->side() == prepare.side && c->of_list(index.image_paths) && c->complete())
    return c;
  if (options.cache_dir.empty()) return nullptr;
  ImageCacheOptions co;
  co.dir = options.cache_dir;
  co.build = false;
  co.quiet = true;
  return CachedImages::of(open_or_build_image_cache(index.image_paths, prepare, co), index.image_paths);
}

}  // namespace

TransformOptions eval_transform(const InferenceOptions& options) {
  TransformOptions to;
  to.image_size = options.image_size;
  to.prepared_size = options.prepared_size;
  to.train = false;
  to.augment.clahe = options.clahe;
  to.dicom = options.dicom;
  return to;
}

std::unique_ptr<BatchLoader> eval_loader(const DatasetIndex& index, std::vector<int64_t> rows,
                                         const InferenceOptions& options) {
  const TransformOptions to = eval_transform(options);
  LoaderOptions lo;
  lo.cache = cached_images(index, to.prepare(), options);
  lo.batch_size = options.batch_size;
  lo.num_workers = options.num_workers;
  lo.prefetch_batches = options.prefetch_batches;
  lo.skip_bad_images = options.skip_bad_images;
  set_loader_transfer(lo, options.device);
  return std::make_unique<BatchLoader>(index, std::move(rows), ImageTransform(to), /*epoch=*/0, lo);
}

torch::Tensor eval_logits(ModelRunner& runner, const torch::Tensor& images, const InferenceOptions& options) {
  torch::Tensor out = runner.logits(images);
  if (options.tta_hflip) out = 0.5 * (out + runner.logits(images.flip({3})));
  return out;
}

namespace {

// This rank's logits, labels and rows on the CPU (one copy to the host at the end), and images skipped.
InferenceResult predict_rows(ModelRunner& runner, const DatasetIndex& index, std::vector<int64_t> rows,
                             const InferenceOptions& options) {
  std::unique_ptr<BatchLoader> loader = eval_loader(index, std::move(rows), options);
  DeviceBatches batches(*loader, device_batch_options(options));
  std::vector<torch::Tensor> logits, labels, got_rows;  // device tensors
  int64_t skipped = 0;
  {
    torch::NoGradGuard no_grad;
    while (auto batch = batches.next()) {
      skipped += batch->skipped;
      if (batch->size() == 0) continue;
      logits.push_back(eval_logits(runner, batch->images, options));
      labels.push_back(batch->labels);
      got_rows.push_back(batch->indices);
    }
  }
  auto cat = [](std::vector<torch::Tensor>& parts, torch::Tensor empty) {
    return parts.empty() ? empty : torch::cat(parts, 0);
  };
  const int64_t c = static_cast<int64_t>(index.num_labels());
  const bool labeled = !index.labels.empty();
  InferenceResult local;
  local.logits = cat(logits, torch::zeros({0, c})).to(torch::kCPU);
  local.labels = cat(labels, torch::zeros({0, labeled ? c : 0})).to(torch::kCPU);
  local.rows = cat(got_rows, torch::zeros({0}, torch::kLong));
  local.skipped = skipped;
  return local;
}

// Puts `all` (gathered rank by rank) back into the order of `rows`.
void restore_order(InferenceResult& all, const std::vector<int64_t>& rows) {
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

}  // namespace

InferenceResult run_inference(Classifier& model, const DatasetIndex& index, const std::vector<int64_t>& rows,
                              const InferenceOptions& options, Collectives& collectives) {
  const bool was_training = model.is_training();
  model.eval();
  const std::unique_ptr<ModelRunner> runner = libtorch_runner(model, options.device, options.precision);
  InferenceResult out = run_inference(*runner, index, rows, options, collectives);
  model.train(was_training);
  return out;
}

InferenceResult run_inference(ModelRunner& runner, const DatasetIndex& index,
                              const std::vector<int64_t>& rows, const InferenceOptions& options,
                              Collectives& collectives) {
  const InferenceResult local = predict_rows(runner, index, rows_of_rank(rows, collectives), options);
  // One gather of everything; then back into the order of `rows`.
  InferenceResult all;
  all.logits = collectives.all_gather_cat(local.logits);
  all.labels = collectives.all_gather_cat(local.labels);
  all.rows = collectives.all_gather_cat(local.rows);
  torch::Tensor skipped = torch::tensor({local.skipped}, torch::kLong);
  collectives.all_reduce_sum(skipped);
  all.skipped = skipped.item<int64_t>();
  if (collectives.world_size() > 1) restore_order(all, rows);
  return all;
}

DeviceBatchOptions device_batch_options(const InferenceOptions& o) {
  return DeviceBatchOptions{o.device, o.in_channels, o.channels_last, o.input_mean, o.input_std};
}

InferenceOptions inference_options(const Config& config, torch::Device device, bool tta) {
  InferenceOptions io;
  io.image_size = config.data.image_size;
  io.prepared_size = prepare_options(config.data).side;
  io.cache_dir = image_cache_dir(config.data);
  io.clahe = config.data.augment.clahe;
  io.dicom = config.data.dicom;
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

namespace ranzcr {

InferenceOptions command_inference_options(const Config& config, torch::Device device, InferUse use,
                                           bool tta) {
  InferenceOptions io = inference_options(config, device, tta);
  io.backend = resolve_backend(config, device, use);
  if (config.infer.precision != InferPrecisionSetting::kAuto)
    io.precision =
        resolve_precision(config.infer.precision == InferPrecisionSetting::kBf16 ? PrecisionSetting::kBf16
                                                                                 : PrecisionSetting::kFp32,
                          device);
  return io;
}

}  // namespace ranzcr
