// net/http.h through libcurl.
#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "core/check.h"
#include "core/write_all.h"
#include "net/http.h"

namespace ranzcr::net {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Collects the headers of the last response (a redirect starts a new set).
size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();
  } else if (const auto colon = line.find(':'); colon != std::string::npos) {
    (*headers)[lowercase(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * count;
}

struct Easy {
  CURL* curl;
  curl_slist* list = nullptr;
  char error[CURL_ERROR_SIZE] = {0};
  Easy() {
    global_init();
    curl = curl_easy_init();
    if (!curl) throw HttpError("libcurl: cannot create a handle", false);
  }
  ~Easy() {
    curl_slist_free_all(list);
    curl_easy_cleanup(curl);
  }
};

void common_setup(Easy& e, const std::string& url, const HttpOptions& o, HttpResponse& r) {
  CURL* c = e.curl;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, e.error);
  curl_easy_setopt(c, CURLOPT_USERAGENT, o.user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  // fewer than 1 byte/s for idle_timeout_s: failed
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(o.idle_timeout_s)));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  e.list = curl_slist_append(e.list, "Accept-Encoding: identity");
  // Sent to the Hub's host only: libcurl drops a custom Authorization header on a redirect to another host.
  if (!o.token.empty()) e.list = curl_slist_append(e.list, ("Authorization: Bearer " + o.token).c_str());
  if (o.token.empty() && !o.basic_auth.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERPWD, o.basic_auth.c_str());  // not sent on to another host either
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, e.list);
}

[[noreturn]] void fail_transport(const Easy& e, CURLcode code, const std::string& url) {
  const std::string detail = e.error[0] ? e.error : curl_easy_strerror(code);
  const bool no_connection = code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_RESOLVE_PROXY ||
                             code == CURLE_COULDNT_CONNECT;
  throw HttpError(url + ": " + detail, false, no_connection);
}

// The body of a GET, written to the file only on 200/206.
struct FileSink {
  std::string path;
  int64_t offset = 0;
  CURL* curl = nullptr;
  int fd = -1;
  int write_errno = 0;
  bool decided = false;
  bool keep = false;  // this response's body belongs in the file
  ~FileSink() {
    if (fd >= 0) ::close(fd);
  }
  bool open_for(long status) {
    decided = true;
    keep = status == 200 || status == 206;
    if (!keep) return true;
    if (status == 200) offset = 0;  // the server sent the whole file: start over
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, offset) != 0 || ::lseek(fd, offset, SEEK_SET) < 0) {
      write_errno = errno;
      return false;
    }
    return true;
  }
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<FileSink*>(user);
  const size_t n = size * count;
  if (!sink->decided) {
    long status = 0;
    curl_easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &status);
    if (!sink->open_for(status)) return 0;
  }
  if (!sink->keep) return n;
  if (!write_all(sink->fd, data, n)) {
    sink->write_errno = errno != 0 ? errno : ENOSPC;  // 0: a write wrote nothing
    return 0;                                         // libcurl stops with CURLE_WRITE_ERROR
  }
  return n;
}

struct ProgressState {
  const ByteProgress* progress;
  int64_t offset;
};

int on_progress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* p = static_cast<ProgressState*>(user);
  if (*p->progress) (*p->progress)(p->offset + now, total > 0 ? p->offset + total : -1);
  return 0;
}

size_t on_body_to_string(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// The file an upload streams from.
struct UploadSource {
  FILE* file = nullptr;
  int read_errno = 0;
  ~UploadSource() {
    if (file) std::fclose(file);
  }
};

size_t on_upload_read(char* buffer, size_t size, size_t count, void* user) {
  auto* source = static_cast<UploadSource*>(user);
  const size_t n = std::fread(buffer, 1, size * count, source->file);
  if (n == 0 && std::ferror(source->file)) {
    source->read_errno = errno != 0 ? errno : EIO;
    return CURL_READFUNC_ABORT;
  }
  return n;
}

int on_cancel_check(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(user);
  return cancel->load() ? 1 : 0;  // non-zero: libcurl stops with CURLE_ABORTED_BY_CALLBACK
}

// The body of `request` for libcurl: a file streamed with PUT semantics, or bytes from memory.
void set_request_body(Easy& e, const HttpRequest& request, UploadSource& source) {
  CURL* c = e.curl;
  if (!request.upload_file.empty()) {
    source.file = std::fopen(request.upload_file.c_str(), "rb");
    if (!source.file)
      throw HttpError("cannot read " + request.upload_file + ": " + std::strerror(errno),
                      /*write_error=*/true);
    std::fseek(source.file, 0, SEEK_END);
    const long size = std::ftell(source.file);
    std::fseek(source.file, 0, SEEK_SET);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &source);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(std::max(0L, size)));
  }
  const bool has_body = request.upload_file.empty() &&
                        (!request.body.empty() || request.method == "POST" || request.method == "PUT");
  if (has_body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
  }
  // UPLOAD means PUT and POSTFIELDS means POST to libcurl; any other method is named.
  const char* implied = !request.upload_file.empty() ? "PUT" : has_body ? "POST" : "GET";
  if (request.method != implied) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (request.method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
}

}  // namespace

std::string HttpResponse::header(const std::string& lowercase_name) const {
  auto it = headers.find(lowercase_name);
  return it == headers.end() ? "" : it->second;
}

HttpResponse http_head(const std::string& url, const HttpOptions& options) {
  Easy e;
  HttpResponse r;
  common_setup(e, url, options, r);
  curl_easy_setopt(e.curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(e.curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e.curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>((options.connect_timeout_s + options.idle_timeout_s) * 1000));
  const CURLcode code = curl_easy_perform(e.curl);
  if (code != CURLE_OK) fail_transport(e, code, url);
  curl_easy_getinfo(e.curl, CURLINFO_RESPONSE_CODE, &r.status);
  return r;
}

HttpResponse http_get_to_file(const std::string& url, const HttpOptions& options, const std::string& path,
                              int64_t offset, const ByteProgress& progress) {
  Easy e;
  HttpResponse r;
  common_setup(e, url, options, r);
  FileSink sink;
  sink.path = path;
  sink.offset = offset;
  sink.curl = e.curl;
  ProgressState ps{&progress, offset};
  curl_easy_setopt(e.curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(e.curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(e.curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e.curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(e.curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e.curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(e.curl, CURLOPT_XFERINFODATA, &ps);
  const std::string range = std::to_string(offset) + "-";
  if (offset > 0) curl_easy_setopt(e.curl, CURLOPT_RANGE, range.c_str());
  const CURLcode code = curl_easy_perform(e.curl);
  curl_easy_getinfo(e.curl, CURLINFO_RESPONSE_CODE, &r.status);
  if (sink.write_errno != 0)
    throw HttpError("writing " + path + ": " + std::strerror(sink.write_errno), /*write_error=*/true);
  if (sink.fd >= 0 && ::fsync(sink.fd) != 0)
    throw HttpError("writing " + path + ": " + std::strerror(errno), /*write_error=*/true);
  if (code != CURLE_OK) fail_transport(e, code, url);
  if (!sink.decided) sink.open_for(r.status);  // an empty body still creates or truncates the file
  return r;
}

HttpReply http_send(const HttpRequest& request, const HttpOptions& options) {
  Easy e;
  HttpResponse r;
  HttpReply reply;
  common_setup(e, request.url, options, r);
  // No "Expect: 100-continue" before a large body: the answer would wait a second for nothing.
  for (const std::string& h : request.headers) e.list = curl_slist_append(e.list, h.c_str());
  e.list = curl_slist_append(e.list, "Expect:");
  curl_easy_setopt(e.curl, CURLOPT_HTTPHEADER, e.list);
  curl_easy_setopt(e.curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e.curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout_s * 1000));
  curl_easy_setopt(e.curl, CURLOPT_WRITEFUNCTION, on_body_to_string);
  curl_easy_setopt(e.curl, CURLOPT_WRITEDATA, &reply.body);
  if (request.cancel) {
    curl_easy_setopt(e.curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e.curl, CURLOPT_XFERINFOFUNCTION, on_cancel_check);
    curl_easy_setopt(e.curl, CURLOPT_XFERINFODATA, request.cancel);
  }
  UploadSource source;
  set_request_body(e, request, source);
  const CURLcode code = curl_easy_perform(e.curl);
  if (source.read_errno != 0)
    throw HttpError("reading " + request.upload_file + ": " + std::strerror(source.read_errno),
                    /*write_error=*/true);
  if (code == CURLE_ABORTED_BY_CALLBACK) throw HttpError(request.url + ": cancelled", false);
  if (code != CURLE_OK) fail_transport(e, code, request.url);
  curl_easy_getinfo(e.curl, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RANZCR_CHECK(in, "cannot read ", path, ": ", std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  RANZCR_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
               "OpenSSL: cannot start a SHA-256");
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(in.gcount()));
  }
  RANZCR_CHECK(!in.bad(), "cannot read ", path, ": ", std::strerror(errno));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &n);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string http_client_version() {
  const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
  return std::string("libcurl ") + v->version;
}

}  // namespace ranzcr::net
