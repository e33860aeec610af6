#include "data/image_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "core/check.h"
#include "core/pixel_budget.h"
#include "core/printable.h"
#include "core/write_all.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'R', 'Z', 'C', 'A', 'C', 'H', 'E', '\0'};
constexpr uint32_t kFormatVersion = 1;
// Bump when what prepare_image makes changes (decoders, resize, CLAHE): every cache is then rebuilt.
constexpr int kPrepareVersion = 1;
constexpr size_t kHeaderSize = 64, kEntrySize = 16, kPage = 4096;

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;

// FNV-1a of `text`, continuing from `h` (a hash so far, or the offset basis).
uint64_t fnv1a(std::string_view text, uint64_t h = kFnvOffset) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void put_u32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), 4);
}
void put_u64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}

// The recipe's line of the key (and of the file name).
std::string recipe_text(const PrepareOptions& r) {
  std::ostringstream s;
  s << "ranzcr image cache " << kFormatVersion << ", prepare " << kPrepareVersion << ": side " << r.side
    << ", clahe " << r.clahe << ", dicom window " << static_cast<int>(r.dicom.window) << " timeout "
    << r.dicom.timeout_seconds << " s memory " << r.dicom.memory_limit_mb << " MiB\n";
  return s.str();
}

// `path` made absolute against `cwd` (the key must not depend on where a run starts).
std::string absolute(const std::string& path, const fs::path& cwd) {
  const fs::path p(path);
  return (p.is_absolute() ? p : cwd / p).lexically_normal().string();
}

size_t align_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// What differs between two keys, for the line that says why a cache is rebuilt.
std::string first_difference(const std::string& stored, const std::string& wanted) {
  std::istringstream a(stored), b(wanted);
  std::string la, lb;
  for (size_t line = 1;; ++line) {
    const bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (ha && hb && la == lb) continue;
    if (!ha && !hb) return "the same key";
    if (line == 1) return "its recipe was '" + printable(la, 200) + "', now '" + printable(lb, 200) + "'";
    if (!ha || !hb)  // one list ends where the other goes on
      return std::string("the image list is now ") + (ha ? "shorter" : "longer") + " than its " +
             std::to_string(ha ? line - 2 + 1 : line - 2) + (ha ? "+" : "") + " images";
    const std::string pa = la.substr(0, la.find('\t')), pb = lb.substr(0, lb.find('\t'));
    if (pa == pb) return "image " + printable(pa, 200) + " changed since (its size or modification time)";
    return "its image " + std::to_string(line - 1) + " was " + printable(pa, 200) + ", now " +
           printable(pb, 200);
  }
}

// No control characters: a stored error is printed as one line.
bool one_line(const uint8_t* text, size_t size) {
  for (size_t i = 0; i < size; ++i)
    if (text[i] < 0x20 || text[i] == 0x7f) return false;
  return true;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

std::string image_cache_key(const std::vector<std::string>& paths, const PrepareOptions& recipe) {
  const fs::path cwd = fs::current_path();
  std::string key = recipe_text(recipe);
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      RANZCR_FAIL("cannot read image ", path, " for the image cache key: ", errno_text());
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    key += absolute(path, cwd) + "\t" + std::to_string(st.st_size) + "\t" + std::to_string(mtime_ns) + "\n";
  }
  return key;
}

std::string image_cache_file_name(const std::vector<std::string>& paths, const PrepareOptions& recipe) {
  const fs::path cwd = fs::current_path();
  std::string text = recipe_text(recipe);
  for (const auto& path : paths) text += absolute(path, cwd) + "\n";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return std::string(hex) + ".rzc";
}

// ---- reading -------------------------------------------------------------------------------------------

std::shared_ptr<const ImageCache> ImageCache::open(const std::string& file, const std::string* key) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ImageCacheError("cannot open image cache " + file + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ImageCacheError("image cache " + file + " is not a regular file");
  }
  std::shared_ptr<ImageCache> cache(new ImageCache());
  cache->file_ = file;
  cache->bytes_ = static_cast<size_t>(st.st_size);
  if (cache->bytes_ > 0) {
    void* p = ::mmap(nullptr, cache->bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw ImageCacheError("cannot map image cache " + file + ": " + errno_text());
    }
    cache->data_ = static_cast<const uint8_t*>(p);
    cache->mapped_ = true;
  }
  ::close(fd);
  cache->parse(key);
  return cache;
}

std::shared_ptr<const ImageCache> ImageCache::view(const uint8_t* data, size_t size, const std::string& name,
                                                   const std::string* key) {
  std::shared_ptr<ImageCache> cache(new ImageCache());
  cache->file_ = name;
  cache->data_ = data;
  cache->bytes_ = size;
  cache->parse(key);
  return cache;
}

ImageCache::~ImageCache() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), bytes_);
}

void ImageCache::parse(const std::string* key) {
  auto fail = [&](const std::string& what) { throw ImageCacheError("image cache " + file_ + " " + what); };
  if (bytes_ < kHeaderSize) fail("is truncated (" + std::to_string(bytes_) + " bytes, no whole header)");
  if (std::memcmp(data_, kMagic, sizeof kMagic) != 0) fail("is not an image cache (no RZCACHE header)");
  const uint32_t version = get_u32(data_ + 8);
  if (version != kFormatVersion)
    fail("has format version " + std::to_string(version) + ", this ranzcr reads " +
         std::to_string(kFormatVersion));
  const uint32_t side = get_u32(data_ + 12);
  const uint64_t count = get_u64(data_ + 16), key_size = get_u64(data_ + 24),
                 index_offset = get_u64(data_ + 32), strings_offset = get_u64(data_ + 40),
                 strings_size = get_u64(data_ + 48), pixels_offset = get_u64(data_ + 56);
  if (side < 1 || side > static_cast<uint32_t>(kMaxPreparedSide))
    fail("declares images of side " + std::to_string(side));
  // Every region inside the file, in order, without overflow (each bound checked before it is used).
  const uint64_t n = bytes_, slot = uint64_t{side} * side;
  const bool regions_fit = key_size <= n - kHeaderSize && index_offset == kHeaderSize + key_size &&
                           count <= (n - index_offset) / kEntrySize && pixels_offset % kPage == 0 &&
                           pixels_offset >= index_offset + count * kEntrySize && pixels_offset <= n &&
                           count <= (n - pixels_offset) / slot &&
                           strings_offset == pixels_offset + count * slot &&
                           strings_size <= n - strings_offset;
  if (!regions_fit)
    fail("is truncated or corrupt (its regions do not fit its " + std::to_string(n) + " bytes)");
  if (strings_offset + strings_size != n)
    fail("is truncated or corrupt (its size is not what its header says)");
  const std::string stored(reinterpret_cast<const char*>(data_ + kHeaderSize), key_size);
  if (key && stored != *key)
    fail("was built for other images or settings: " + first_difference(stored, *key));
  side_ = static_cast<int>(side);
  count_ = count;
  index_ = data_ + index_offset;
  strings_ = data_ + strings_offset;
  strings_size_ = strings_size;
  pixels_ = data_ + pixels_offset;
  for (size_t i = 0; i < count_; ++i) {
    const uint8_t* e = index_ + i * kEntrySize;
    const int32_t w = static_cast<int32_t>(get_u32(e)), h = static_cast<int32_t>(get_u32(e + 4));
    const uint64_t off = get_u32(e + 8), len = get_u32(e + 12);
    const bool ok = len > 0 ? off <= strings_size_ && len <= strings_size_ - off &&
                                  one_line(strings_ + off, len)  // printed as a warning, so one line
                            : pixel_count_within_limit(w, h);    // as the decoders allow
    if (!ok) fail("has a corrupt entry " + std::to_string(i));
  }
  // The paths, from the key's lines after the recipe: entry i is line i + 1.
  size_t at = stored.find('\n');
  for (size_t i = 0; at != std::string::npos && i < count_; ++i) {
    const size_t end = stored.find('\n', at + 1);
    const std::string line =
        stored.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    by_path_.emplace(line.substr(0, line.find('\t')), static_cast<int64_t>(i));
    at = end;
  }
  if (by_path_.size() != count_)
    fail("is corrupt (its key names " + std::to_string(by_path_.size()) + " distinct images for " +
         std::to_string(count_) + " entries)");
}

int64_t ImageCache::find(const std::string& path) const {
  const auto it = by_path_.find(absolute(path, fs::current_path()));
  return it == by_path_.end() ? -1 : it->second;
}

std::shared_ptr<const CachedImages> CachedImages::of(std::shared_ptr<const ImageCache> cache,
                                                     const std::vector<std::string>& paths) {
  if (!cache) return nullptr;
  auto out = std::make_shared<CachedImages>();
  out->entries = cache->entries_of(paths);
  out->list_hash = hash_of(paths);
  out->cache = std::move(cache);
  return out;
}

std::vector<int64_t> ImageCache::entries_of(const std::vector<std::string>& paths) const {
  const fs::path cwd = fs::current_path();
  std::vector<int64_t> out(paths.size(), -1);
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto it = by_path_.find(absolute(paths[i], cwd));
    if (it != by_path_.end()) out[i] = it->second;
  }
  return out;
}

uint64_t CachedImages::hash_of(const std::vector<std::string>& paths) {
  uint64_t h = kFnvOffset;
  for (const std::string& p : paths)
    h = fnv1a("\xff", fnv1a(p, h));  // a separator no path byte can make ambiguous with the next path
  return h;
}

bool CachedImages::of_list(const std::vector<std::string>& paths) const {
  return entries.size() == paths.size() && list_hash == hash_of(paths);
}

bool CachedImages::complete() const {
  return std::find(entries.begin(), entries.end(), int64_t{-1}) == entries.end();
}

cv::Mat ImageCache::image(int64_t i, cv::Size* original_size) const {
  if (i < 0 || static_cast<size_t>(i) >= count_)
    throw std::out_of_range("image cache entry " + std::to_string(i) + " of " + std::to_string(count_));
  const uint8_t* e = index_ + i * kEntrySize;
  const uint32_t len = get_u32(e + 12);
  if (len > 0) RANZCR_FAIL(std::string_view(reinterpret_cast<const char*>(strings_ + get_u32(e + 8)), len));
  if (original_size)
    *original_size = cv::Size(static_cast<int32_t>(get_u32(e)), static_cast<int32_t>(get_u32(e + 4)));
  const size_t slot = static_cast<size_t>(side_) * side_;
  return cv::Mat(side_, side_, CV_8UC1, const_cast<uint8_t*>(pixels_ + i * slot));
}

// ---- building ------------------------------------------------------------------------------------------

namespace {

struct Entry {
  cv::Size original;
  std::string error;  // empty: decoded
};

// pwrite all of `size` bytes at `offset`, or throw naming the file.
void write_at(int fd, const void* data, size_t size, uint64_t offset, const std::string& file) {
  if (!pwrite_all(fd, data, size, offset)) RANZCR_FAIL("cannot write image cache ", file, ": ", errno_text());
}

std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", static_cast<double>(bytes) / (1ULL << 30));
  return s;
}

// Decodes entries with `threads` threads, each image's pixels written to its slot as it is done.
std::vector<Entry> decode_all(int fd, const std::string& tmp, uint64_t pixels_offset,
                              const std::vector<std::string>& paths, const PrepareOptions& recipe,
                              int threads, const ImageCacheProgress& progress) {
  const size_t count = paths.size(), slot = static_cast<size_t>(recipe.side) * recipe.side;
  std::vector<Entry> entries(count);
  std::atomic<size_t> next{0}, done{0}, bad{0};
  std::atomic<bool> stop{false};
  std::exception_ptr fatal;
  std::mutex mutex;
  std::condition_variable cv;
  auto work = [&] {
    for (size_t i; !stop && (i = next++) < count;) {
      try {
        cv::Mat img;
        try {
          img = prepare_image(paths[i], recipe, &entries[i].original);
        } catch (const std::runtime_error& e) {
          entries[i].error = e.what();  // the image's own error: stored, then failed or skipped as without
          ++bad;
        }
        if (!img.empty()) {
          CV_Assert(img.isContinuous() && img.total() == slot);
          write_at(fd, img.data, slot, pixels_offset + i * slot, tmp);
        }
      } catch (...) {  // anything else ends the build (no room, the DICOM helper cannot run)
        std::lock_guard<std::mutex> lock(mutex);
        if (!fatal) fatal = std::current_exception();
        stop = true;
      }
      ++done;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(work);
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop && done < count) {
      cv.wait_for(lock, std::chrono::seconds(1));
      if (progress && done < count) progress(done, count, bad);
    }
  }
  for (auto& t : pool) t.join();
  if (fatal) std::rethrow_exception(fatal);
  // The last line once, here: the workers may all be done before the loop above looks even once.
  if (progress) progress(count, count, bad);
  return entries;
}

}  // namespace

void build_image_cache(const std::string& file, const std::string& key, const std::vector<std::string>& paths,
                       const PrepareOptions& recipe, int threads, const ImageCacheProgress& progress) {
  const uint64_t count = paths.size(), slot = uint64_t{static_cast<uint32_t>(recipe.side)} * recipe.side;
  const uint64_t index_offset = kHeaderSize + key.size();
  const uint64_t pixels_offset = align_up(index_offset + count * kEntrySize, kPage);
  const uint64_t strings_offset = pixels_offset + count * slot;
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RANZCR_CHECK(fd >= 0, "cannot create image cache ", tmp, ": ", errno_text());
  try {
    // Room for the whole file first: a full disk is one line before any decoding, not a failure an hour in
    // (checked before reserving, so a cache that cannot fit never fills the disk on the way).
    struct statvfs vfs {};
    const std::string dir = fs::path(file).parent_path().string();
    const uint64_t free_bytes = ::statvfs(dir.c_str(), &vfs) == 0 ? uint64_t{vfs.f_bavail} * vfs.f_frsize : 0;
    const int rc =
        free_bytes < strings_offset ? ENOSPC : ::posix_fallocate(fd, 0, static_cast<off_t>(strings_offset));
    RANZCR_CHECK(rc == 0, "no room for the image cache ", file, ": it needs ", gib(strings_offset), ", ", dir,
                 " has ", gib(free_bytes), " free (", std::strerror(rc),
                 "; set data.cache: off, or data.cache: a folder with room)");
    const std::vector<Entry> entries = decode_all(fd, tmp, pixels_offset, paths, recipe, threads, progress);
    std::string strings, index;
    for (const Entry& e : entries) {
      put_u32(&index, static_cast<uint32_t>(e.original.width));
      put_u32(&index, static_cast<uint32_t>(e.original.height));
      put_u32(&index, static_cast<uint32_t>(strings.size()));
      put_u32(&index, static_cast<uint32_t>(e.error.size()));
      strings += e.error;
    }
    std::string head(kMagic, sizeof kMagic);
    put_u32(&head, kFormatVersion);
    put_u32(&head, static_cast<uint32_t>(recipe.side));
    for (uint64_t v :
         {count, uint64_t{key.size()}, index_offset, strings_offset, uint64_t{strings.size()}, pixels_offset})
      put_u64(&head, v);
    write_at(fd, strings.data(), strings.size(), strings_offset, tmp);
    write_at(fd, key.data(), key.size(), kHeaderSize, tmp);
    write_at(fd, index.data(), index.size(), index_offset, tmp);
    write_at(fd, head.data(), head.size(), 0, tmp);  // last: a file without its header is never taken for one
    if (::fsync(fd) != 0) RANZCR_FAIL("cannot write image cache ", tmp, ": ", errno_text());
    ::close(fd);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    RANZCR_FAIL("cannot publish image cache ", file, ": ", why);
  }
  const int dir = ::open(fs::path(file).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

// ---- the cache of a run --------------------------------------------------------------------------------

namespace {

// An exclusive lock on `path` (flock) for as long as it lives: the processes of a node take turns.
class FileLock {
 public:
  FileLock(const std::string& path, const std::function<void(const std::string&)>& say) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    RANZCR_CHECK(fd_ >= 0, "cannot create image cache lock ", path, ": ", errno_text());
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    say("cache: waiting for another process building or checking " + path.substr(0, path.size() - 5));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) RANZCR_FAIL("cannot lock ", path, ": ", errno_text());
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Temporaries of builds that were killed (under the lock, no build of this name is running).
void remove_stale_temporaries(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(name + ".tmp.", 0) == 0) fs::remove(e.path(), ec);
}

ImageCacheProgress progress_printer(const std::function<void(const std::string&)>& say) {
  const auto start = std::chrono::steady_clock::now();
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(start);
  return [=](size_t done, size_t total, size_t bad) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - *last < std::chrono::seconds(10)) return;
    *last = now;
    const double secs = std::chrono::duration<double>(now - start).count();
    const double rate = secs > 0 ? done / secs : 0.0;
    char line[160];
    std::snprintf(line, sizeof line, "cache: %zu/%zu images (%.0f%%), %.0f images/s, %zu unreadable", done,
                  total, total ? 100.0 * done / total : 100.0, rate, bad);
    std::string text = line;
    if (done < total && rate > 0)
      text += ", about " + std::to_string(static_cast<int>((total - done) / rate)) + " s left";
    say(text);
  };
}

}  // namespace

std::shared_ptr<const ImageCache> open_or_build_image_cache(const std::vector<std::string>& paths,
                                                            const PrepareOptions& recipe,
                                                            const ImageCacheOptions& options) {
  const std::function<void(const std::string&)> say = [&options](const std::string& line) {
    if (options.quiet) return;
    if (options.log)
      options.log(line);
    else
      std::fprintf(stderr, "%s\n", line.c_str());
  };
  const std::string name = image_cache_file_name(paths, recipe);
  const std::string file = (fs::path(options.dir) / name).string();
  if (!options.build) {  // a published file is whole (renamed into place): no lock, and nothing created
    if (!fs::exists(file)) return nullptr;
    try {
      const std::string key = image_cache_key(paths, recipe);
      return ImageCache::open(file, &key);
    } catch (const ImageCacheError& e) {
      say(std::string(e.what()) + "; decoding the images instead");
      return nullptr;
    }
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  RANZCR_CHECK(!ec, "cannot create the image cache folder ", options.dir, ": ", ec.message());
  FileLock lock(file + ".lock", say);
  const std::string key = image_cache_key(paths, recipe);
  std::string why = "there is none yet";
  if (fs::exists(file)) {
    try {
      return ImageCache::open(file, &key);
    } catch (const ImageCacheError& e) {
      why = e.what();
    }
  }
  say("cache: building " + file + ": " + std::to_string(paths.size()) + " images at " +
      std::to_string(recipe.side) + " x " + std::to_string(recipe.side) + ", " +
      std::to_string(options.threads) + " threads (" + why + ")");
  remove_stale_temporaries(options.dir, name);
  const auto start = std::chrono::steady_clock::now();
  build_image_cache(file, key, paths, recipe, options.threads,
                    options.quiet ? ImageCacheProgress() : progress_printer(say));
  auto cache = ImageCache::open(file, &key);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  say("cache: built " + file + " in " + secs + " s");
  return cache;
}

std::string image_cache_dir(const DataConfig& data) {
  if (data.cache == "off") return "";
  if (data.cache == "on") return (fs::path(data.root) / "cache").string();
  return data.cache;
}

std::shared_ptr<const CachedImages> open_run_cache(const DataConfig& data,
                                                   const std::vector<std::string>& paths,
                                                   const std::function<void(const std::string&)>& log) {
  ImageCacheOptions co;
  co.dir = image_cache_dir(data);
  if (co.dir.empty()) return nullptr;
  co.threads = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  co.log = log;
  return CachedImages::of(open_or_build_image_cache(paths, prepare_options(data), co), paths);
}

}  // namespace ranzcr
