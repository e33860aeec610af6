#include "hub/hub_cache.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/check.h"

namespace fs = std::filesystem;

namespace ranzcr::hub {

namespace {

std::string read_first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

[[noreturn]] void fail_io(const std::string& what, const fs::path& path, int err) {
  RANZCR_FAIL("Hugging Face cache: ", what, " ", path.string(), ": ", std::strerror(err));
}

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_io("cannot create", dir, ec.value());
}

}  // namespace

void tag_cache_dir(const std::string& cache_dir) {
  const fs::path tag = fs::path(cache_dir) / "CACHEDIR.TAG";
  std::error_code ec;
  if (fs::exists(tag, ec)) return;
  fs::create_directories(cache_dir, ec);
  std::ofstream(tag) << "Signature: 8a477f597d28d172789f06886806bc55\n"
                        "# This file is a cache directory tag created by huggingface_hub.\n"
                        "# For information about cache directory tags, see https://bford.info/cachedir/\n";
}

bool is_commit_hash(const std::string& revision) {
  if (revision.size() != 40) return false;
  for (char c : revision)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string out = "models--";
  for (char c : repo_id) out += c == '/' ? std::string("--") : std::string(1, c);
  return out;
}

RepoCache::RepoCache(std::string cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)), repo_id_(std::move(repo_id)) {}

std::string RepoCache::folder() const {
  return (fs::path(cache_dir_) / repo_folder_name(repo_id_)).string();
}

std::string RepoCache::blob_path(const std::string& etag) const {
  return (fs::path(folder()) / "blobs" / etag).string();
}

std::string RepoCache::lock_path(const std::string& etag) const {
  return (fs::path(cache_dir_) / ".locks" / repo_folder_name(repo_id_) / (etag + ".lock")).string();
}

std::string RepoCache::snapshot_path(const std::string& commit, const std::string& filename) const {
  return (fs::path(folder()) / "snapshots" / commit / filename).string();
}

std::optional<std::string> RepoCache::commit_of(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  const std::string commit = read_first_line(fs::path(folder()) / "refs" / revision);
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

std::optional<std::string> RepoCache::cached_file(const std::string& commit,
                                                  const std::string& filename) const {
  const fs::path p = snapshot_path(commit, filename);
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;  // follows the link: a dangling one is absent
  return p.string();
}

bool RepoCache::has_blob(const std::string& etag) const {
  std::error_code ec;
  return fs::is_regular_file(blob_path(etag), ec);
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = fs::path(folder()) / "refs" / revision;
  if (read_first_line(ref) == commit) return;
  make_dirs(ref.parent_path());
  const fs::path tmp = ref.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out.flush()) fail_io("cannot write", tmp, errno);
  }
  std::error_code ec;
  fs::rename(tmp, ref, ec);
  if (ec) fail_io("cannot write", ref, ec.value());
}

std::string RepoCache::link_snapshot(const std::string& commit, const std::string& filename,
                                     const std::string& etag) const {
  const fs::path pointer = snapshot_path(commit, filename);
  make_dirs(pointer.parent_path());
  const fs::path target = fs::path(blob_path(etag)).lexically_relative(pointer.parent_path());
  // A new link under a temporary name, then renamed over the old one: readers never see it missing.
  const fs::path tmp = pointer.string() + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) fail_io("cannot create the link", tmp, ec.value());
  fs::rename(tmp, pointer, ec);
  if (ec) fail_io("cannot create the link", pointer, ec.value());
  return pointer.string();
}

FileLock::FileLock(const std::string& path, const std::function<void()>& on_wait) {
  make_dirs(fs::path(path).parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0) fail_io("cannot open the lock", path, errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK && on_wait) on_wait();
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    fail_io("cannot lock", path, err);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace ranzcr::hub
