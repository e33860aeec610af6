// Multi-threaded batch loader: worker threads decode, transform and collate whole batches into tensors,
// a bounded prefetch window keeps memory flat, and batches come out in order regardless of thread timing.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset_index.h"
#include "data/image_pipeline.h"

namespace ranzcr {

struct Batch {
  torch::Tensor images;   // [N, 1, S, S] float32, values in [0, 1]
  torch::Tensor labels;   // [N, C] float32, 0/1 ([N, 0] when the index is unlabeled)
  torch::Tensor indices;  // [N] int64, rows of the DatasetIndex
  int64_t skipped = 0;    // unreadable images left out of this batch (skip_bad_images)
};

struct LoaderOptions {
  int batch_size = 32;
  int num_workers = 2;
  int prefetch_batches = 4;      // batches decoded ahead of the consumer, at most
  bool skip_bad_images = false;  // false: an unreadable image is an error
  bool drop_last = false;        // drop a final partial batch
  bool pin_memory = false;       // page-locked host memory (for CUDA copies)
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

 private:
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  void work();
  Batch make_batch(int64_t b) const;

  const DatasetIndex& index_;
  std::vector<int64_t> rows_;
  ImageTransform transform_;
  int64_t epoch_;
  LoaderOptions options_;
  int64_t num_batches_;

  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t next_claim_ = 0;
  int64_t consumed_ = 0;
  bool stop_ = false;
  std::map<int64_t, Result> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace ranzcr
