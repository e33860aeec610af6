// One file of a Hugging Face Hub model repository, from the shared cache or downloaded into it, the way
// huggingface_hub's hf_hub_download does: HEAD {endpoint}/{repo}/resolve/{revision}/{file} for the commit
// (X-Repo-Commit) and the blob's ETag (X-Linked-Etag for LFS files: their SHA-256), then, unless the
// cache holds that blob, GET the file (following the redirect to the CDN) into blobs/<etag>.incomplete,
// resumed with HTTP Range after a cut, checked (size; SHA-256 for LFS files), renamed to blobs/<etag>,
// linked from snapshots/<commit>/<file>, refs/<revision> updated. One process per blob at a time (the
// cache's lock file). A commit id as revision, or offline, never touches the network.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

namespace ranzcr::hub {

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string cache_dir;                            // HF_HUB_CACHE (see hub_options_from_env)
  std::string token;                                // HF_TOKEN or the token file of `hf auth login`
  bool offline = false;                             // HF_HUB_OFFLINE: the cache only
  double connect_timeout_s = 10;                    // HF_HUB_ETAG_TIMEOUT
  double idle_timeout_s = 10;                       // HF_HUB_DOWNLOAD_TIMEOUT: no byte for this long
  int retries = 5;         // per request, after transport errors, 5xx, 429 or a bad hash
  double backoff_s = 1.0;  // first wait between tries, doubled each time (max 16 s)
  /// Progress of a download: the file's label ("ORG/NAME/FILE"), bytes so far and total (-1 unknown).
  std::function<void(const std::string& label, int64_t done, int64_t total)> progress;
  /// Notes worth a log line (a retry, a fallback to the cache).
  std::function<void(const std::string& line)> note;
};

/// The options huggingface_hub would take from this environment: HF_ENDPOINT, HF_HUB_CACHE (else
/// HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface or
/// ~/.cache/huggingface), HF_TOKEN (else the file HF_TOKEN_PATH or $HF_HOME/token), HF_HUB_OFFLINE
/// (1/ON/YES/TRUE), HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT.
HubOptions hub_options_from_env(const std::map<std::string, std::string>& env);

enum class HubErrorKind {
  kRepoNotFound,      // no such repository (or private without a token)
  kRevisionNotFound,  // no such branch, tag or commit
  kEntryNotFound,     // the repository has no such file
  kAuth,              // gated or private: a token is needed, or the token has no access
  kOfflineMiss,       // offline and not in the cache
  kNetwork,           // no answer from the endpoint (after the retries)
  kOther,             // a bad answer, a corrupt download, a full disk
};

/// One line naming the repository, file and what to do.
class HubError : public std::runtime_error {
 public:
  HubError(HubErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  HubErrorKind kind() const { return kind_; }

 private:
  HubErrorKind kind_;
};

struct HubFile {
  std::string repo_id;
  std::string revision;  // as asked ("main", a tag or a commit)
  std::string commit;    // the commit it resolved to
  std::string filename;
  std::string path;  // snapshots/<commit>/<filename> in the cache (a link to the blob)
  std::string etag;
  int64_t size = 0;
  bool downloaded = false;  // false: it was in the cache
};

/// "850 kB", "46.8 MB": a size for messages and progress lines.
std::string format_bytes(int64_t bytes);

/// Validates "ORG/NAME" as huggingface_hub does (letters, digits, '-', '_', '.'; no "--" or ".."; at most
/// 96 characters a part). Throws HubError (kOther) naming what is wrong.
void check_repo_id(const std::string& repo_id);

/// The file, from the cache or downloaded into it. Throws HubError.
HubFile hub_download(const HubOptions& options, const std::string& repo_id, const std::string& revision,
                     const std::string& filename);

}  // namespace ranzcr::hub
