#include "data/batch_loader.h"

#include "core/check.h"

#include <pthread.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>

namespace ranzcr {

// The image tensors of batches, handed out again once the consumer drops a batch. A fresh one per batch is
// a block the size of a whole batch (32 x 512 x 512 floats: 32 MiB), which malloc maps anew every time: the
// kernel then faults in and zeroes each of its pages, more work than the loader's own per image. At most
// `keep` free blocks stay, as many as batches can be in flight: memory stays bounded by the prefetch.
class ImageBuffers : public std::enable_shared_from_this<ImageBuffers> {
 public:
  ImageBuffers(size_t bytes, size_t keep) : bytes_(bytes), keep_(keep) {}
  ~ImageBuffers() {
    for (void* p : free_) std::free(p);
  }
  /// A tensor of `sizes` and `options` (at most `bytes` of it) over a reused block.
  torch::Tensor take(at::IntArrayRef sizes, const torch::TensorOptions& options) {
    TORCH_CHECK(c10::multiply_integers(sizes) * static_cast<int64_t>(options.dtype().itemsize()) <=
                    static_cast<int64_t>(bytes_),
                "batch of ", sizes, " larger than the loader's image blocks");
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
      }
    }
    if (!p && !(p = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64))) throw std::bad_alloc();
    // The deleter holds the pool: a batch may outlive its loader.
    return torch::from_blob(
        p, sizes, [pool = shared_from_this()](void* q) { pool->give_back(q); }, options);
  }

 private:
  void give_back(void* p) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.size() < keep_) {
        free_.push_back(p);
        return;
      }
    }
    std::free(p);
  }

  const size_t bytes_, keep_;
  std::mutex mutex_;
  std::vector<void*> free_;
};

BatchLoader::BatchLoader(const DatasetIndex& index, std::vector<int64_t> rows, ImageTransform transform,
                         int64_t epoch, LoaderOptions options)
    : index_(index),
      rows_(std::move(rows)),
      transform_(std::move(transform)),
      epoch_(epoch),
      options_(options) {
  const int64_t n = static_cast<int64_t>(rows_.size()), bs = options_.batch_size;
  num_batches_ = options_.drop_last ? n / bs : (n + bs - 1) / bs;
  if (const auto& c = options_.cache) {
    const int side = transform_.options().prepare().side;
    if (c->cache->side() != side)
      throw std::logic_error("image cache " + c->cache->file() + " holds images of " +
                             std::to_string(c->cache->side()) + " px, the transform prepares " +
                             std::to_string(side));
    if (!c->of_list(index_.image_paths))
      throw std::logic_error("the entries of image cache " + c->cache->file() +
                             " are of another image list (" + std::to_string(c->entries.size()) +
                             " images; the index has " + std::to_string(index_.image_paths.size()) + ")");
    for (int64_t row : rows_)
      if (c->entries.at(row) < 0)
        throw std::logic_error("image " + index_.image_paths[row] + " is not in the image cache " +
                               c->cache->file());
  }
  if (!options_.pin_memory) {  // pinned batches come from the CUDA host allocator, which caches its blocks
    const int64_t s = transform_.options().image_size;
    const size_t bytes = static_cast<size_t>(options_.batch_size * s * s) * (options_.uint8_images ? 1 : 4);
    buffers_ = std::make_shared<ImageBuffers>(bytes, options_.prefetch_batches + options_.num_workers + 2);
  }
  last_change_ = std::chrono::steady_clock::now();
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { work(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void BatchLoader::work() {
  pthread_setname_np(pthread_self(), "ranzcr-loader");  // top -H, perf and bench's CPU figures name it
  for (;;) {
    int64_t b;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || next_claim_ >= num_batches_ || next_claim_ < consumed_ + options_.prefetch_batches;
      });
      if (stop_ || next_claim_ >= num_batches_) return;
      b = next_claim_++;
    }
    Result result;
    try {
      result.batch = make_batch(b);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      account_queue(std::chrono::steady_clock::now());
      ready_.emplace(b, std::move(result));
    }
    cv_.notify_all();
  }
}

namespace {

// One line per skipped file, naming it and why (the epoch's log counts them): written whole, so lines of
// several loader threads never interleave.
void report_skipped(const std::string& why) {
  const std::string line = "warning: skipped unreadable image: " + why + "\n";
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

Batch BatchLoader::make_batch(int64_t b) const {
  const int64_t begin = b * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, rows_.size());
  std::vector<TransformedImage> images;
  std::vector<int64_t> kept;
  std::vector<cv::Size> sizes;
  Batch batch;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t row = rows_[i];
    try {
      cv::Size size;
      images.push_back(transform_.transform_u8(prepared(row, &size), epoch_, row));
      kept.push_back(row);
      sizes.push_back(size);
    } catch (const std::runtime_error& e) {
      if (!options_.skip_bad_images)
        RANZCR_FAIL(e.what(), " (set data.skip_bad_images=true to skip such files)");
      ++batch.skipped;
      report_skipped(e.what());
    }
  }
  collate(images, kept, &batch);
  if (options_.annotations) collate_masks(images, kept, sizes, &batch);
  return batch;
}

cv::Mat BatchLoader::prepared(int64_t row, cv::Size* original_size) const {
  if (const auto& c = options_.cache) return c->cache->image(c->entries[row], original_size);
  return prepare_image(index_.image_paths[row], transform_.options().prepare(), original_size);
}

void BatchLoader::collate_masks(const std::vector<TransformedImage>& images, const std::vector<int64_t>& kept,
                                const std::vector<cv::Size>& sizes, Batch* batch) const {
  const int s = transform_.options().image_size;
  const int64_t n = static_cast<int64_t>(kept.size());
  auto opts = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(options_.pin_memory);
  batch->masks = torch::zeros({n, 1, s, s}, opts);
  batch->has_annotation = torch::zeros({n}, opts.dtype(torch::kFloat32));
  const auto& by_row = options_.annotations->by_row;
  for (int64_t i = 0; i < n; ++i) {
    const auto& devices = by_row.at(static_cast<size_t>(kept[i]));
    if (devices.empty()) continue;
    const cv::Mat mask = transform_mask(rasterize_mask(devices, sizes[i], s), images[i].geometry);
    uint8_t* dst = batch->masks.data_ptr<uint8_t>() + i * s * s;
    for (int y = 0; y < s; ++y) std::memcpy(dst + y * s, mask.ptr<uint8_t>(y), s);
    batch->has_annotation.data_ptr<float>()[i] = 1.0f;
  }
}

void BatchLoader::collate(const std::vector<TransformedImage>& images, const std::vector<int64_t>& kept,
                          Batch* batch) const {
  const int s = transform_.options().image_size;
  const int64_t c = static_cast<int64_t>(index_.num_labels());
  const bool labeled = !index_.labels.empty();
  const int64_t n = static_cast<int64_t>(kept.size());
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(options_.pin_memory);
  const auto image_opts = options_.uint8_images ? opts.dtype(torch::kUInt8) : opts;
  batch->images =
      buffers_ ? buffers_->take({n, 1, s, s}, image_opts) : torch::empty({n, 1, s, s}, image_opts);
  batch->labels = torch::zeros({n, labeled ? c : 0}, opts);
  batch->indices = torch::empty({n}, torch::kLong);
  if (options_.uint8_images) {
    batch->pixel_scale = torch::empty({n}, opts);
    batch->pixel_offset = torch::empty({n}, opts);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (options_.uint8_images) {
      uint8_t* dst = batch->images.data_ptr<uint8_t>() + i * s * s;
      for (int y = 0; y < s; ++y) std::memcpy(dst + y * s, images[i].u8.ptr<uint8_t>(y), s);
      batch->pixel_scale.data_ptr<float>()[i] = static_cast<float>(images[i].scale);
      batch->pixel_offset.data_ptr<float>()[i] = static_cast<float>(images[i].offset);
    } else {
      cv::Mat dst(s, s, CV_32FC1, batch->images.data_ptr<float>() + i * s * s);
      to_float(images[i], dst);
    }
    batch->indices.data_ptr<int64_t>()[i] = kept[i];
    if (labeled)
      std::memcpy(batch->labels.data_ptr<float>() + i * c, index_.labels.data() + kept[i] * c,
                  c * sizeof(float));
  }
}

int BatchLoader::ready_in_order() const {
  int n = 0;
  while (ready_.count(consumed_ + n)) ++n;
  return n;
}

void BatchLoader::account_queue(std::chrono::steady_clock::time_point now) {
  const double dt = std::chrono::duration<double>(now - last_change_).count();
  const int depth = ready_in_order();
  stats_.seconds += dt;
  stats_.depth_seconds += depth * dt;
  if (depth == 0) stats_.empty_seconds += dt;
  last_change_ = now;
}

void BatchLoader::reset_queue_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = LoaderQueueStats{};
  last_change_ = std::chrono::steady_clock::now();
}

LoaderQueueStats BatchLoader::queue_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  account_queue(std::chrono::steady_clock::now());
  return stats_;
}

std::optional<Batch> BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (consumed_ >= num_batches_) return std::nullopt;
  stats_.depth_at_next.push_back(ready_in_order());
  const auto asked = std::chrono::steady_clock::now();
  cv_.wait(lock, [&] { return ready_.count(consumed_) > 0; });
  const auto now = std::chrono::steady_clock::now();
  stats_.wait_seconds += std::chrono::duration<double>(now - asked).count();
  account_queue(now);
  auto node = ready_.extract(consumed_);
  ++consumed_;
  lock.unlock();
  cv_.notify_all();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
}

}  // namespace ranzcr
