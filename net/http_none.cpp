// net/http.h in a build without libcurl (the offline bundle's, for hosts with no network): the Hub cache
// is read as usual, and a file that is not there is one error line saying how to bring it.
#include "core/check.h"
#include "net/http.h"

namespace ranzcr::net {

namespace {
[[noreturn]] void no_client(const std::string& url) {
  throw HttpError(url +
                      ": this ranzcr was built without libcurl and cannot download; fill the Hugging Face "
                      "cache on a machine with network (ranzcr fetch-weights NAME) and copy it here",
                  false);
}
}  // namespace

std::string HttpResponse::header(const std::string& lowercase_name) const {
  auto it = headers.find(lowercase_name);
  return it == headers.end() ? "" : it->second;
}

HttpResponse http_head(const std::string& url, const HttpOptions&) {
  no_client(url);
}

HttpResponse http_get_to_file(const std::string& url, const HttpOptions&, const std::string&, int64_t,
                              const ByteProgress&) {
  no_client(url);
}

HttpReply http_send(const HttpRequest& request, const HttpOptions&) {
  throw HttpError(request.url + ": this ranzcr was built without libcurl and has no HTTP client", false);
}

std::string file_sha256(const std::string& path) {
  RANZCR_FAIL(path, ": this ranzcr was built without OpenSSL (no SHA-256)");
}

std::string http_client_version() {
  return "";
}

}  // namespace ranzcr::net
