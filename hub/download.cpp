#include "hub/download.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/digits.h"
#include "hub/hub_cache.h"
#include "net/http.h"

namespace fs = std::filesystem;

namespace ranzcr::hub {

using net::ByteProgress;
using net::file_sha256;
using net::http_get_to_file;
using net::http_head;
using net::HttpError;
using net::HttpOptions;
using net::HttpResponse;

namespace {

std::string env_or(const std::map<std::string, std::string>& env, const std::string& key,
                   const std::string& fallback) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

bool truthy(std::string v) {
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

double seconds_or(const std::map<std::string, std::string>& env, const std::string& key, double fallback) {
  const std::string v = env_or(env, key, "");
  if (v.empty()) return fallback;
  try {
    return std::max(1.0, std::stod(v));
  } catch (const std::exception&) {
    throw HubError(HubErrorKind::kOther, key + "=" + v + ": expected a number of seconds");
  }
}

// Percent-encodes all but unreserved characters (and '/' when `keep_slash`), as urllib.parse.quote.
std::string quote(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// "scheme://host[:port]" of a URL.
std::string origin_of(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const auto path = url.find('/', scheme + 3);
  return path == std::string::npos ? url : url.substr(0, path);
}

// An ETag without its weak marker and quotes.
std::string normalize_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
  return etag;
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); });
}

int64_t file_size_or(const std::string& path, int64_t fallback) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? fallback : static_cast<int64_t>(n);
}

void wait_before_retry(const HubOptions& o, int attempt) {
  const double s = std::min(16.0, o.backoff_s * static_cast<double>(1 << std::min(attempt, 10)));
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

bool retry_status(long status) {
  return status == 429 || status >= 500;
}

HttpOptions http_options(const HubOptions& o) {
  HttpOptions h;
  h.token = o.token;
  h.connect_timeout_s = o.connect_timeout_s;
  h.idle_timeout_s = o.idle_timeout_s;
  return h;
}

struct Request {
  const HubOptions& options;
  std::string repo_id, revision, filename;
  std::string url;    // {endpoint}/{repo}/resolve/{revision}/{filename}
  std::string label;  // ORG/NAME/FILE
};

// The error an HTTP status of the Hub stands for (huggingface_hub's hf_raise_for_status).
[[noreturn]] void fail_status(const Request& q, const HttpResponse& r) {
  const std::string code = r.header("x-error-code");
  const std::string http = " (HTTP " + std::to_string(r.status) + " from " + q.options.endpoint + ")";
  const bool token = !q.options.token.empty();
  if (code == "RepoNotFound" || (r.status == 401 && code.empty() && !token))
    throw HubError(HubErrorKind::kRepoNotFound,
                   "repository " + q.repo_id + " not found on the Hugging Face Hub" + http +
                       (token ? "; check the name, and that the token in HF_TOKEN may read it"
                              : "; check the name (a private repository needs HF_TOKEN)"));
  if (code == "GatedRepo" || r.status == 401 || r.status == 403)
    throw HubError(HubErrorKind::kAuth,
                   token ? q.repo_id + " refused the token in HF_TOKEN" + http +
                               ": request access to the repository on the Hub with that account"
                         : q.repo_id + " is gated or private and needs an access token" + http +
                               ": accept its terms on the Hub, then set HF_TOKEN to a token of that account");
  if (code == "RevisionNotFound")
    throw HubError(HubErrorKind::kRevisionNotFound,
                   "revision '" + q.revision + "' not found in " + q.repo_id + http);
  if (code == "EntryNotFound" || r.status == 404)
    throw HubError(HubErrorKind::kEntryNotFound,
                   q.repo_id + " has no file " + q.filename + " at revision " + q.revision + http);
  throw HubError(HubErrorKind::kOther, "unexpected HTTP " + std::to_string(r.status) + " for " + q.url);
}

struct Metadata {
  std::string commit, etag, location;
  int64_t size = -1;
  bool lfs = false;  // the ETag is the file's SHA-256
};

// HEAD with the retries; redirects on the Hub's own host (a renamed repository) are followed, one to another
// host (the CDN) is not: its answer carries the file's metadata, and the token stays on the Hub.
HttpResponse head_with_retries(const Request& q) {
  const HttpOptions h = http_options(q.options);
  const std::string hub = origin_of(q.options.endpoint);
  for (int attempt = 0;; ++attempt) {
    std::string url = q.url;
    try {
      HttpResponse r = http_head(url, h);
      for (int hops = 0; hops < 10 && r.status >= 300 && r.status < 400; ++hops) {
        std::string location = r.header("location");
        if (!location.empty() && location[0] == '/') location = hub + location;
        if (location.empty() || origin_of(location) != hub) break;
        url = location;
        r = http_head(url, h);
      }
      if (!retry_status(r.status) || attempt >= q.options.retries) return r;
      if (q.options.note)
        q.options.note(q.label + ": HTTP " + std::to_string(r.status) + ", trying again (" +
                       std::to_string(attempt + 1) + "/" + std::to_string(q.options.retries) + ")");
    } catch (const HttpError& e) {
      if (e.no_connection() || attempt >= q.options.retries) throw;
      if (q.options.note)
        q.options.note(std::string(e.what()) + "; trying again (" + std::to_string(attempt + 1) + "/" +
                       std::to_string(q.options.retries) + ")");
    }
    wait_before_retry(q.options, attempt);
  }
}

Metadata read_metadata(const Request& q, const HttpResponse& r) {
  if (r.status >= 400) fail_status(q, r);
  Metadata m;
  m.commit = r.header("x-repo-commit");
  const std::string linked = normalize_etag(r.header("x-linked-etag"));
  m.etag = linked.empty() ? normalize_etag(r.header("etag")) : linked;
  m.lfs = is_sha256(linked);
  // A redirect's Content-Length is its own body's: only X-Linked-Size tells the size of a redirected file.
  const std::string size = !r.header("x-linked-size").empty() ? r.header("x-linked-size")
                           : r.status == 200                  ? r.header("content-length")
                                                              : "";
  if (const auto n = parse_digits64(size, std::string::npos)) m.size = *n;
  const std::string location = r.header("location");
  m.location = r.status >= 300 && r.status < 400 && !location.empty()
                   ? (location[0] == '/' ? origin_of(q.options.endpoint) + location : location)
                   : q.url;
  if (!is_commit_hash(m.commit) || m.etag.empty() || m.etag.find('/') != std::string::npos)
    throw HubError(HubErrorKind::kOther, q.url +
                                             ": the answer lacks a commit (X-Repo-Commit) or an ETag: is " +
                                             q.options.endpoint + " a Hugging Face Hub (HF_ENDPOINT)?");
  return m;
}

// One GET into `incomplete` from its current size; returns true when the file is whole and checked.
bool fetch_once(const Request& q, const Metadata& m, const std::string& incomplete, int attempt) {
  const HubOptions& o = q.options;
  int64_t offset = file_size_or(incomplete, 0);
  if (m.size >= 0 && offset > m.size) offset = 0;  // not a prefix of this file: start over
  if (offset > 0 && o.note) o.note(q.label + ": resuming the partial download at " + format_bytes(offset));
  ByteProgress progress;
  if (o.progress) progress = [&](int64_t done, int64_t total) { o.progress(q.label, done, total); };
  HttpResponse r;
  if (m.size < 0 || offset < m.size || m.size == 0) {
    r = http_get_to_file(m.location, http_options(o), incomplete, offset, progress);
    if (r.status == 416) {  // the range does not fit the file: start over
      fs::remove(incomplete);
      return false;
    }
    if (retry_status(r.status)) {
      if (attempt >= o.retries) fail_status(q, r);
      return false;
    }
    if (r.status >= 400) fail_status(q, r);
  }
  const int64_t got = file_size_or(incomplete, -1);
  if (m.size >= 0 && got != m.size) {
    if (got > m.size) fs::remove(incomplete);
    if (attempt >= o.retries)
      throw HubError(HubErrorKind::kOther, q.label + ": received " + std::to_string(got) +
                                               " bytes, expected " + std::to_string(m.size));
    return false;
  }
  if (m.lfs) {
    const std::string sha = file_sha256(incomplete);
    if (sha != m.etag) {
      fs::remove(incomplete);
      const std::string what =
          q.label + ": the download is corrupt (SHA-256 " + sha + ", the Hub says " + m.etag + ")";
      if (attempt >= o.retries) throw HubError(HubErrorKind::kOther, what + "; removed it, giving up");
      if (o.note) o.note(what + "; removed it, fetching it again");
      return false;
    }
  }
  return true;
}

// "" when the cached blob is what the Hub describes (its size; the SHA-256 of an LFS file), else what is
// wrong.
std::string blob_problem(const Metadata& m, const std::string& blob) {
  const int64_t size = file_size_or(blob, -1);
  if (m.size >= 0 && size != m.size)
    return std::to_string(size) + " bytes, the Hub says " + std::to_string(m.size);
  if (m.lfs) {
    const std::string sha = file_sha256(blob);
    if (sha != m.etag) return "SHA-256 " + sha + ", the Hub says " + m.etag;
  }
  return "";
}

// blobs/<etag> from the network, under the blob's lock; nothing if another process wrote it meanwhile.
// A blob that does not match the Hub's description is removed and fetched again. Returns whether this
// process downloaded it.
bool download_blob(const Request& q, const Metadata& m, const RepoCache& cache) {
  FileLock lock(cache.lock_path(m.etag), [&] {
    if (q.options.note)
      q.options.note(q.label + ": another process is downloading it (" + cache.lock_path(m.etag) +
                     "); waiting");
  });
  const std::string blob = cache.blob_path(m.etag);
  if (cache.has_blob(m.etag)) {
    const std::string problem = blob_problem(m, blob);
    if (problem.empty()) return false;
    if (q.options.note)
      q.options.note(q.label + ": the cached " + blob + " is damaged (" + problem + "); fetching it again");
    fs::remove(blob);
  }
  std::error_code ec;
  fs::create_directories(fs::path(blob).parent_path(), ec);
  if (ec)
    throw HubError(HubErrorKind::kOther, "Hugging Face cache: cannot create " + blob + ": " + ec.message());
  const std::string incomplete = blob + ".incomplete";
  for (int attempt = 0;; ++attempt) {
    try {
      if (fetch_once(q, m, incomplete, attempt)) break;
    } catch (const HttpError& e) {
      if (e.write_error())
        throw HubError(HubErrorKind::kOther, std::string(e.what()) + " (the partial download stays as " +
                                                 incomplete + " and is resumed by the next try)");
      if (attempt >= q.options.retries)
        throw HubError(HubErrorKind::kNetwork, q.label + ": download failed after " +
                                                   std::to_string(attempt + 1) + " tries: " + e.what());
      if (q.options.note)
        q.options.note(std::string(e.what()) + "; trying again (" + std::to_string(attempt + 1) + "/" +
                       std::to_string(q.options.retries) + ")");
    }
    wait_before_retry(q.options, attempt);
  }
  fs::rename(incomplete, blob, ec);
  if (ec) throw HubError(HubErrorKind::kOther, "cannot rename " + incomplete + ": " + ec.message());
  return true;
}

HubFile from_cache(const Request& q, const RepoCache& cache, const std::string& commit,
                   const std::string& path) {
  HubFile f;
  f.repo_id = q.repo_id;
  f.revision = q.revision;
  f.commit = commit;
  f.filename = q.filename;
  f.path = path;
  std::error_code ec;
  const fs::path target = fs::read_symlink(path, ec);
  f.etag = ec ? "" : target.filename().string();
  f.size = file_size_or(path, 0);
  return f;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  char s[32];
  if (bytes < 1000000)
    std::snprintf(s, sizeof s, "%.0f kB", static_cast<double>(bytes) / 1e3);
  else
    std::snprintf(s, sizeof s, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return s;
}

HubOptions hub_options_from_env(const std::map<std::string, std::string>& env) {
  HubOptions o;
  o.endpoint = env_or(env, "HF_ENDPOINT", o.endpoint);
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  const std::string home_cache = env_or(env, "HOME", ".") + "/.cache";
  const std::string hf_home =
      env_or(env, "HF_HOME", env_or(env, "XDG_CACHE_HOME", home_cache) + "/huggingface");
  o.cache_dir = env_or(env, "HF_HUB_CACHE", env_or(env, "HUGGINGFACE_HUB_CACHE", hf_home + "/hub"));
  o.token = env_or(env, "HF_TOKEN", "");
  if (o.token.empty()) {
    std::ifstream in(env_or(env, "HF_TOKEN_PATH", hf_home + "/token"));
    std::getline(in, o.token);
    while (!o.token.empty() && std::isspace(static_cast<unsigned char>(o.token.back()))) o.token.pop_back();
  }
  o.offline = truthy(env_or(env, "HF_HUB_OFFLINE", env_or(env, "TRANSFORMERS_OFFLINE", "")));
  o.connect_timeout_s = seconds_or(env, "HF_HUB_ETAG_TIMEOUT", o.connect_timeout_s);
  o.idle_timeout_s = seconds_or(env, "HF_HUB_DOWNLOAD_TIMEOUT", o.idle_timeout_s);
  return o;
}

void check_repo_id(const std::string& repo_id) {
  const auto slash = repo_id.find('/');
  auto part_ok = [](const std::string& p) {
    return !p.empty() && p.size() <= 96 && p.front() != '-' && p.front() != '.' && p.back() != '-' &&
           p.back() != '.' && std::all_of(p.begin(), p.end(), [](unsigned char c) {
             return std::isalnum(c) || c == '-' || c == '_' || c == '.';
           });
  };
  const bool ok = slash != std::string::npos && part_ok(repo_id.substr(0, slash)) &&
                  part_ok(repo_id.substr(slash + 1)) && repo_id.find("--") == std::string::npos &&
                  repo_id.find("..") == std::string::npos;
  if (!ok)
    throw HubError(HubErrorKind::kOther,
                   "'" + repo_id +
                       "' is not a Hub repository id: expected ORG/NAME of letters, digits, "
                       "'-', '_' and '.' (no '--' or '..')");
}

HubFile hub_download(const HubOptions& options, const std::string& repo_id, const std::string& revision,
                     const std::string& filename) {
  check_repo_id(repo_id);
  if (filename.empty() || filename.front() == '/' || filename.find("..") != std::string::npos)
    throw HubError(HubErrorKind::kOther, "'" + filename + "' is not a file name inside a repository");
  const Request q{
      options,
      repo_id,
      revision,
      filename,
      options.endpoint + "/" + repo_id + "/resolve/" + quote(revision, false) + "/" + quote(filename, true),
      repo_id + "/" + filename};
  const RepoCache cache(options.cache_dir, repo_id);
  const auto cached_commit = cache.commit_of(revision);
  const auto cached = cached_commit ? cache.cached_file(*cached_commit, filename) : std::nullopt;
  if (cached && is_commit_hash(revision)) return from_cache(q, cache, *cached_commit, *cached);
  if (options.offline) {
    if (cached) return from_cache(q, cache, *cached_commit, *cached);
    throw HubError(HubErrorKind::kOfflineMiss, repo_id + " " + filename + " (revision " + revision +
                                                   ") is not in the Hugging Face cache " + options.cache_dir +
                                                   ", and HF_HUB_OFFLINE=1 forbids downloading it");
  }
  HttpResponse head;
  try {
    head = head_with_retries(q);
  } catch (const HttpError& e) {
    if (cached) {  // as huggingface_hub: no answer, but the cache has it
      if (options.note)
        options.note(std::string("cannot reach ") + options.endpoint + " (" + e.what() +
                     "): using the cached " + q.label + " of commit " + *cached_commit);
      return from_cache(q, cache, *cached_commit, *cached);
    }
    throw HubError(
        HubErrorKind::kNetwork,
        "cannot reach the Hugging Face Hub at " + options.endpoint + " for " + q.label + ": " + e.what() +
            " (on a host without network, fill the cache elsewhere with `ranzcr fetch-weights` and "
            "set HF_HUB_OFFLINE=1)");
  }
  const Metadata m = read_metadata(q, head);
  // In the cache and intact: nothing to write (the cache may be read-only; the ref is updated if it can be).
  const auto pointer = cache.cached_file(m.commit, filename);
  if (pointer && cache.has_blob(m.etag) && blob_problem(m, cache.blob_path(m.etag)).empty()) {
    try {
      cache.write_ref(revision, m.commit);
    } catch (const std::exception&) {
    }
    return from_cache(q, cache, m.commit, *pointer);
  }
  tag_cache_dir(options.cache_dir);
  cache.write_ref(revision, m.commit);
  HubFile f;
  f.repo_id = repo_id;
  f.revision = revision;
  f.commit = m.commit;
  f.filename = filename;
  f.etag = m.etag;
  f.downloaded = download_blob(q, m, cache);  // checks the blob again under its lock
  f.path = cache.link_snapshot(m.commit, filename, m.etag);
  f.size = file_size_or(f.path, 0);
  return f;
}

}  // namespace ranzcr::hub
