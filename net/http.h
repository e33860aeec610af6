// The HTTP(S) client, through libcurl; no LibTorch. hub/ and tracking/ use it: a HEAD that does not follow
// redirects (the Hub's answer, not the CDN's, carries the commit and the ETag), a GET into a file from an
// offset (HTTP Range) following redirects, and one generic request with its answer in memory (REST calls
// and artifact uploads); and the SHA-256 a downloaded file is checked with (OpenSSL). Transport failures
// throw HttpError; an HTTP status is returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ranzcr::net {

struct HttpOptions {
  std::string token;              // "Authorization: Bearer <token>" when set
  std::string basic_auth;         // "user:password": HTTP basic auth when set and there is no token
  double connect_timeout_s = 10;  // TCP + TLS connect
  double idle_timeout_s = 10;     // a transfer that receives nothing for this long fails
  std::string user_agent = "ranzcr";
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercased; the last response of a redirect chain
  /// The header's value, "" when absent.
  std::string header(const std::string& lowercase_name) const;
};

/// A request that got no HTTP answer (refused, timed out, cut off, TLS failure) or a file that could
/// not be written. `write_error`: the local file, not the network (a full disk), not worth a retry.
class HttpError : public std::runtime_error {
 public:
  HttpError(const std::string& message, bool write_error, bool no_connection = false)
      : std::runtime_error(message), write_error_(write_error), no_connection_(no_connection) {}
  bool write_error() const { return write_error_; }
  /// The host could not be resolved or connected to (not a cut transfer).
  bool no_connection() const { return no_connection_; }

 private:
  bool write_error_;
  bool no_connection_;
};

/// Called with the bytes of the file so far (the offset included) and its total (-1 unknown).
using ByteProgress = std::function<void(int64_t done, int64_t total)>;

/// HEAD `url` without following redirects.
HttpResponse http_head(const std::string& url, const HttpOptions& options);

/// GET `url` (redirects followed) appending the body to the file `path` from byte `offset` on, asking for
/// "Range: bytes=<offset>-" when offset > 0. The file is written only on a 200 (from 0: the file is
/// truncated first) or a 206 answer; other statuses leave it as it was and are returned.
HttpResponse http_get_to_file(const std::string& url, const HttpOptions& options, const std::string& path,
                              int64_t offset, const ByteProgress& progress);

/// A request of any method, its body from memory or from a file, not following redirects.
struct HttpRequest {
  std::string method = "GET";  // GET, POST, PUT, DELETE, ...
  std::string url;
  std::vector<std::string> headers;  // "Name: value" lines
  std::string body;                  // sent when not empty (and no upload_file)
  std::string upload_file;           // when set, this file's bytes are the body (streamed, not read first)
  double timeout_s = 30;             // the whole request, connect included
  const std::atomic<bool>* cancel = nullptr;  // when it turns true the request fails (HttpError) within ~1 s
};

struct HttpReply {
  long status = 0;
  std::string body;
};

/// Sends `request` and returns the answer, whatever its status. HttpError when there is none (refused,
/// unresolved: no_connection(); timed out, cut off, cancelled) or `upload_file` cannot be read
/// (write_error(): a local file, not worth a retry).
HttpReply http_send(const HttpRequest& request, const HttpOptions& options);

/// The SHA-256 of a file, 64 lowercase hex digits (OpenSSL). Throws std::runtime_error when unreadable.
std::string file_sha256(const std::string& path);

/// Whether this build can download ("libcurl 7.88.1") or only read the cache ("").
std::string http_client_version();

}  // namespace ranzcr::net
