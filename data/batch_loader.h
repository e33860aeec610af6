// Multi-threaded batch loader: worker threads decode, transform and collate whole batches into tensors,
// a bounded prefetch window keeps memory flat, and batches come out in order regardless of thread timing.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/annotations.h"
#include "data/dataset_index.h"
#include "data/image_cache.h"
#include "data/image_pipeline.h"

namespace ranzcr {

class ImageBuffers;

struct Batch {
  torch::Tensor images;          // [N, 1, S, S] float32 in [0, 1]; uint8 with LoaderOptions::uint8_images
  torch::Tensor pixel_scale;     // [N] float32, uint8 batches only: float = clamp(u8 * scale + offset, 0, 1)
  torch::Tensor pixel_offset;    // [N] float32, uint8 batches only
  torch::Tensor labels;          // [N, C] float32, 0/1 ([N, 0] when the index is unlabeled)
  torch::Tensor indices;         // [N] int64, rows of the DatasetIndex
  torch::Tensor masks;           // LoaderOptions::annotations only: [N, 1, S, S] uint8 0/1, the devices
  torch::Tensor has_annotation;  // LoaderOptions::annotations only: [N] float32, 1 = the image has devices
  int64_t skipped = 0;           // unreadable images left out of this batch (skip_bad_images)
};

struct LoaderOptions {
  int batch_size = 32;
  int num_workers = 2;
  int prefetch_batches = 4;      // batches decoded ahead of the consumer, at most
  bool skip_bad_images = false;  // false: an unreadable image is an error
  bool drop_last = false;        // drop a final partial batch
  bool pin_memory = false;       // page-locked host memory (for CUDA copies)
  bool uint8_images = false;     // hand over 8-bit images + per-image scale/offset (normalised later)
  /// Set: each batch also carries the device masks (rasterised, then the image's geometric transform).
  std::shared_ptr<const ImageAnnotations> annotations;
  /// Set: prepared images come from this cache instead of being decoded. Its entries are the index's
  /// image list's, every loaded row among them, at the transform's prepared size.
  std::shared_ptr<const CachedImages> cache;
};

/// How the prefetch window fared for the consumer since BatchLoader::reset_queue_stats() (bench's figures:
/// whether a run is loader-bound).
struct LoaderQueueStats {
  double seconds = 0.0;            // since the reset
  double wait_seconds = 0.0;       // the consumer blocked in next()
  double empty_seconds = 0.0;      // no finished batch ready for the consumer (it would have waited)
  double depth_seconds = 0.0;      // the ready batches' count over time (mean depth: depth_seconds / seconds)
  std::vector<int> depth_at_next;  // the batches ready for the consumer when each next() was called
};

class BatchLoader {
 public:
  /// Loads `index` rows in the order `rows`, transformed with `transform` for `epoch`.
  BatchLoader(const DatasetIndex& index, std::vector<int64_t> rows, ImageTransform transform, int64_t epoch,
              LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  /// The next batch in order, or nullopt at the end. Rethrows a worker's error (e.g. a corrupt image).
  std::optional<Batch> next();
  int64_t num_batches() const { return num_batches_; }
  /// Starts the queue's statistics afresh, now.
  void reset_queue_stats();
  /// The queue's statistics since the last reset (or the start).
  LoaderQueueStats queue_stats();

 private:
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  void work();
  /// Batches finished and waiting in order for the consumer (its next() would not wait). Under mutex_.
  int ready_in_order() const;
  /// Adds the time since the last change of the queue to stats_. Under mutex_, before each change.
  void account_queue(std::chrono::steady_clock::time_point now);
  Batch make_batch(int64_t b) const;
  /// The prepared image of index row `row` (from the cache, else decoded) and the file's own size.
  cv::Mat prepared(int64_t row, cv::Size* original_size) const;
  void collate(const std::vector<TransformedImage>& images, const std::vector<int64_t>& kept,
               Batch* batch) const;
  /// The masks of the kept images (sizes: the files' own) into batch->masks / has_annotation.
  void collate_masks(const std::vector<TransformedImage>& images, const std::vector<int64_t>& kept,
                     const std::vector<cv::Size>& sizes, Batch* batch) const;

  const DatasetIndex& index_;
  std::vector<int64_t> rows_;
  ImageTransform transform_;
  int64_t epoch_;
  LoaderOptions options_;
  int64_t num_batches_;
  std::shared_ptr<ImageBuffers> buffers_;  // the batches' image memory, reused (unpinned batches)

  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t next_claim_ = 0;
  int64_t consumed_ = 0;
  bool stop_ = false;
  std::map<int64_t, Result> ready_;
  LoaderQueueStats stats_;
  std::chrono::steady_clock::time_point last_change_;
  std::vector<std::thread> workers_;
};

}  // namespace ranzcr
