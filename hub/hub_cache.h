// The Hugging Face Hub's local cache, in the layout Python's huggingface_hub documents and shares with
// every other client (https://huggingface.co/docs/huggingface_hub/guides/manage-cache):
//   <cache>/models--ORG--NAME/blobs/<etag>                 the files' bytes, named by their ETag
//   <cache>/models--ORG--NAME/blobs/<etag>.incomplete      while downloading (resumed from its size)
//   <cache>/models--ORG--NAME/snapshots/<commit>/<file>    relative symbolic link to ../../blobs/<etag>
//   <cache>/models--ORG--NAME/refs/<revision>              the commit a branch or tag resolved to
//   <cache>/.locks/models--ORG--NAME/<etag>.lock           held (flock) while a blob is being written
// The lock is the same advisory lock huggingface_hub's filelock takes, so ranzcr and Python processes that
// share a cache (also over NFS) never write one blob twice at once.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ranzcr::hub {

/// True for a 40-character lowercase hexadecimal commit id.
bool is_commit_hash(const std::string& revision);

/// "models--ORG--NAME" for repo id "ORG/NAME".
std::string repo_folder_name(const std::string& repo_id);

/// Tags the cache folder for backup tools (CACHEDIR.TAG, as huggingface_hub does); errors are ignored.
void tag_cache_dir(const std::string& cache_dir);

/// The cache folder of one model repository.
class RepoCache {
 public:
  RepoCache(std::string cache_dir, std::string repo_id);

  /// <cache>/models--ORG--NAME
  std::string folder() const;
  std::string blob_path(const std::string& etag) const;
  std::string lock_path(const std::string& etag) const;
  std::string snapshot_path(const std::string& commit, const std::string& filename) const;

  /// The commit `revision` stands for in the cache: itself when it is a commit id, else refs/<revision>
  /// (nullopt when there is no such ref).
  std::optional<std::string> commit_of(const std::string& revision) const;
  /// snapshots/<commit>/<filename> when it exists and resolves to a file.
  std::optional<std::string> cached_file(const std::string& commit, const std::string& filename) const;
  /// Whether blobs/<etag> exists.
  bool has_blob(const std::string& etag) const;

  /// Writes refs/<revision> = commit (atomically), unless `revision` is the commit itself.
  void write_ref(const std::string& revision, const std::string& commit) const;
  /// snapshots/<commit>/<filename> -> ../../blobs/<etag> (a relative link, replaced if present).
  std::string link_snapshot(const std::string& commit, const std::string& filename,
                            const std::string& etag) const;

 private:
  std::string cache_dir_;
  std::string repo_id_;
};

/// An exclusive flock() on a lock file (created with its folders, mode 0664 as huggingface_hub makes it),
/// released by the destructor. `on_wait` is called once when another process holds it (then it blocks).
class FileLock {
 public:
  explicit FileLock(const std::string& path, const std::function<void()>& on_wait = {});
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ranzcr::hub
