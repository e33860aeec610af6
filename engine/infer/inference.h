// Batched inference over rows of a data set, sharded over ranks without padding, gathered once.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "data/dataset_index.h"
#include "data/image_cache.h"
#include "distributed/collectives.h"
#include "engine/config/config.h"
#include "engine/infer/model_runner.h"
#include "engine/runtime/device_batches.h"
#include "engine/runtime/precision.h"
#include "models/registry.h"

namespace ranzcr {

struct InferenceOptions {
  int image_size = 256;
  int prepared_size = 0;  // images are prepared (and cached) at this side; 0: image_size
  bool clahe = false;
  DicomConfig dicom;  // data.dicom
  /// Prepared images from here when it holds every image of the index inference runs over at prepared_size
  /// (the training run's own, for validation)...
  std::shared_ptr<const CachedImages> cache;
  /// ...else from a cache in this folder that already holds them (data.cache; "": decode every image).
  std::string cache_dir;
  int batch_size = 64;
  int num_workers = 2;
  int prefetch_batches = 4;
  bool skip_bad_images = false;
  bool tta_hflip = false;  // average the logits of the image and its horizontal mirror
  int in_channels = 1;
  std::vector<double> input_mean{0.0};  // model.input_mean / model.input_std
  std::vector<double> input_std{1.0};
  torch::Device device = torch::kCPU;
  Precision precision = Precision::kFp32;  // autocast dtype of the forward
  bool channels_last = false;              // NHWC input (for a channels_last model)
  BackendOptions backend;  // LibTorch unless the command resolved infer.backend (resolve_backend)
};

struct InferenceResult {
  torch::Tensor logits;  // [N, C] float32, CPU, in the order of `rows` (skipped images left out)
  torch::Tensor labels;  // [N, C] float32 0/1 ([N, 0] when the index is unlabeled)
  torch::Tensor rows;    // [N] int64: the index row of each prediction
  int64_t skipped = 0;   // unreadable images skipped (all ranks)
};

/// Runs `runner` over `rows` of `index`. Each rank takes rows[rank::world]; the results are gathered on every
/// rank and put back in the order of `rows`, so the metric sees exactly the full set.
InferenceResult run_inference(ModelRunner& runner, const DatasetIndex& index,
                              const std::vector<int64_t>& rows, const InferenceOptions& options,
                              Collectives& collectives);

/// The same with LibTorch's forward of `model` in eval mode (training's validation; its mode is restored).
InferenceResult run_inference(Classifier& model, const DatasetIndex& index, const std::vector<int64_t>& rows,
                              const InferenceOptions& options, Collectives& collectives);

/// The float32 logits of a batch already on the device (DeviceBatch::images), in the caller's grad mode:
/// the runner's, averaged with the mirrored image's under tta_hflip.
torch::Tensor eval_logits(ModelRunner& runner, const torch::Tensor& images, const InferenceOptions& options);

/// This rank's share of `rows` (in order, unpadded: every row is predicted once over the ranks).
std::vector<int64_t> rows_of_rank(const std::vector<int64_t>& rows, Collectives& collectives);

/// The evaluation transform under `options` (prepared size, CLAHE, DICOM; resize only, no augmentation).
TransformOptions eval_transform(const InferenceOptions& options);

/// The evaluation loader over `rows` under `options` (resize only, no augmentation).
std::unique_ptr<BatchLoader> eval_loader(const DatasetIndex& index, std::vector<int64_t> rows,
                                         const InferenceOptions& options);

/// Inference settings (size, CLAHE, batch, loader, channels, precision, layout) from the config, for
/// validation, evaluate and predict alike; `tta` adds hflip averaging on top of train.tta_hflip.
InferenceOptions inference_options(const Config& config, torch::Device device, bool tta = false);

/// inference_options plus the command's backend (infer.backend and infer.precision, resolve_backend): for
/// evaluate, predict, serve and cv's out-of-fold pass. An explicit infer.precision sets LibTorch's autocast
/// too (auto leaves it at train.precision's, as training's validation runs).
InferenceOptions command_inference_options(const Config& config, torch::Device device, InferUse use,
                                           bool tta = false);

/// How batches reach the model under `options` (device, channels, input normalisation, layout): the
/// same for validation and training.
DeviceBatchOptions device_batch_options(const InferenceOptions& options);

}  // namespace ranzcr
