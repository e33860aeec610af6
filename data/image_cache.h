// The decoded-image cache (data.cache): every image of a data set decoded once, resized to the prepared size
// (data.cache_size) with CLAHE applied, in one file per image list and decode recipe, read through a memory
// map. Every loader thread and every process of a node that opens the same file shares its pages.
//
// File layout (little-endian; `.rzc`):
//   header   64 bytes: "RZCACHE\0", u32 version, u32 side, u64 count, u64 key_size, u64 index_offset,
//            u64 strings_offset, u64 strings_size, u64 pixels_offset
//   key      key_size bytes at 64: the text of image_cache_key (paths, sizes, modification times, recipe)
//   index    count entries of 16 bytes: i32 original width, i32 original height, u32 error offset, u32 error
//            size (0: decoded; else the image's one-line error, stored so a bad file fails or is skipped
//            every epoch as it would be without the cache)
//   pixels   page-aligned, count slots of side * side bytes (CV_8UC1), slot i for entry i
//   strings  the error lines, to the end of the file
// Built into a temporary beside the file, header written last, then renamed: a reader sees a whole file
// or none. The key's lines after the first name the images, entry i on line i + 2.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/image_pipeline.h"

namespace ranzcr {

/// One line: a cache file that cannot be used (truncated, foreign, built for another key).
class ImageCacheError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The text that decides whether a cache file fits: the format and recipe versions, the recipe, and per
/// image its path, size in bytes and modification time (ns). Throws std::runtime_error when an image
/// cannot be stat'ed (naming it).
std::string image_cache_key(const std::vector<std::string>& paths, const PrepareOptions& recipe);

/// The file name for `paths` and `recipe` (without sizes and times, so a changed image rebuilds the same
/// file instead of leaving the old one behind): "<16 hex digits>.rzc".
std::string image_cache_file_name(const std::vector<std::string>& paths, const PrepareOptions& recipe);

class ImageCache {
 public:
  /// Maps `file` and checks it whole against `key` (nullptr: any key, for tools). Throws ImageCacheError
  /// naming the file and what is wrong; never reads outside the file.
  static std::shared_ptr<const ImageCache> open(const std::string& file, const std::string* key);
  /// The same checks over bytes in memory (the fuzz target): the view keeps no copy of `data`.
  static std::shared_ptr<const ImageCache> view(const uint8_t* data, size_t size, const std::string& name,
                                                const std::string* key);
  ~ImageCache();
  ImageCache(const ImageCache&) = delete;
  ImageCache& operator=(const ImageCache&) = delete;

  size_t size() const { return count_; }
  int side() const { return side_; }
  const std::string& file() const { return file_; }
  /// The entry of `path` (relative paths against the working folder), or -1 when the cache does not hold it.
  int64_t find(const std::string& path) const;
  /// find() of each path, the working folder read once (CachedImages::of keeps the result).
  std::vector<int64_t> entries_of(const std::vector<std::string>& paths) const;
  /// Entry i as CV_8UC1 side x side over the mapped pixels (no copy; valid while the cache lives), and its
  /// original size. Throws std::runtime_error with the image's stored error line for an unreadable image.
  cv::Mat image(int64_t i, cv::Size* original_size = nullptr) const;

 private:
  ImageCache() = default;
  void parse(const std::string* key);

  std::string file_;
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
  int side_ = 0;
  size_t count_ = 0;
  const uint8_t* index_ = nullptr;
  const uint8_t* strings_ = nullptr;
  size_t strings_size_ = 0;
  const uint8_t* pixels_ = nullptr;
  std::unordered_map<std::string, int64_t> by_path_;
};

/// Progress of a build: (done, total, unreadable so far).
using ImageCacheProgress = std::function<void(size_t, size_t, size_t)>;

/// Decodes and prepares every image of `paths` with `threads` threads (prepare_image, data/image_pipeline.h)
/// into `file`, written to a temporary beside it and renamed into place once whole. A per-image error is
/// stored; anything else (no space, the DICOM helper cannot run) removes the temporary and throws.
void build_image_cache(const std::string& file, const std::string& key, const std::vector<std::string>& paths,
                       const PrepareOptions& recipe, int threads, const ImageCacheProgress& progress);

struct ImageCacheOptions {
  std::string dir;     // the cache folder (created)
  bool build = true;   // false: use a fitting file if there is one, never build (nullptr otherwise)
  int threads = 2;     // decode threads of a build
  bool quiet = false;  // no lines (progress, waiting, why a file is rebuilt)
  std::function<void(const std::string&)> log;  // where the lines go (unset: stderr)
};

/// A cache and where each image of one image list is in it: looked up once per list by whoever opened
/// the cache, then shared by every loader over that list (each epoch's, validation's).
struct CachedImages {
  std::shared_ptr<const ImageCache> cache;
  std::vector<int64_t> entries;  // per path of the list, its entry in `cache`, or -1 when it has none
  uint64_t list_hash = 0;        // hash_of(paths) of the list

  /// find() of each of `paths` (the working folder read once); nullptr for a null cache.
  static std::shared_ptr<const CachedImages> of(std::shared_ptr<const ImageCache> cache,
                                                const std::vector<std::string>& paths);
  /// A hash of the paths as given, in order (no file system access): which list `entries` belong to.
  static uint64_t hash_of(const std::vector<std::string>& paths);
  /// Whether these are the entries of `paths`.
  bool of_list(const std::vector<std::string>& paths) const;
  /// Whether `cache` holds every image of the list.
  bool complete() const;
};

/// The cache of `paths`: opens the fitting file in `options.dir`, else (options.build) builds it. Processes
/// that ask at once (the ranks of a node) take turns on a lock file: one builds, the others then open it.
/// A stale, truncated or foreign file under the name is rebuilt, with one line saying why.
std::shared_ptr<const ImageCache> open_or_build_image_cache(const std::vector<std::string>& paths,
                                                            const PrepareOptions& recipe,
                                                            const ImageCacheOptions& options);

/// The cache folder of `data`: "" for data.cache "off", <data.root>/cache for "on", else data.cache itself.
std::string image_cache_dir(const DataConfig& data);

/// A training run's cache of `paths` under `data` (nullptr when data.cache is off): opened, or built with
/// every core of the machine (the other processes of the node wait for it), lines to `log`.
std::shared_ptr<const CachedImages> open_run_cache(const DataConfig& data,
                                                   const std::vector<std::string>& paths,
                                                   const std::function<void(const std::string&)>& log);

}  // namespace ranzcr
