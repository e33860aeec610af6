// serve's HTTP request and answer as plain values: what the event-driven server (http_server.cpp,
// Boost.Beast) hands the endpoints (service.cpp) and gets back. No Beast, no LibTorch here: the endpoints and
// their tests see only these.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ranzcr {

/// One request, read whole: its header checked (valid UTF-8, no NUL, within the limits) and its body read.
struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;    // percent-decoded name=value pairs, in order
  std::vector<std::pair<std::string, std::string>> headers;  // as sent (names compared case-insensitively)
  std::string body;
  std::chrono::steady_clock::time_point arrival;  // its header read: the answer's deadline counts from here
  std::shared_ptr<void>
      hold;  // kept until the endpoint lets go (Batcher::Incoming while an upload is on its way)

  /// The first header named `name` (any case), "" when none.
  std::string header(const std::string& name) const;
  /// Every query value named `name`, in order.
  std::vector<std::string> params(const std::string& name) const;
};

/// One answer. Bodies of errors are `{"error": "..."}` (json_error).
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beside Content-Type and Content-Length
  bool close = false;                                        // close the connection after this answer
};

/// Sends the answer of one request; may be called from any thread, once.
using Respond = std::function<void(HttpResponse)>;

/// `{"error": message}` and a newline: the body of every answer other than 200. Bytes of `message` that are
/// not UTF-8 are replaced (U+FFFD), so that building an error never throws.
std::string json_error(const std::string& message);

/// An error answer: `status`, json_error(message).
HttpResponse error_response(int status, const std::string& message);

/// `text` is valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool valid_utf8(const std::string& text);

/// Percent-decodes `text` (with `plus_is_space` as in a query); false when a '%' is not followed by two hex
/// digits.
bool percent_decode(const std::string& text, bool plus_is_space, std::string& out);

/// Splits a request target ("/a%20b?x=1&y") into the decoded path and query. Throws std::invalid_argument
/// with one line naming what is wrong: a bad percent escape, invalid UTF-8 or a NUL after decoding.
void split_target(const std::string& target, std::string& path,
                  std::vector<std::pair<std::string, std::string>>& query);

}  // namespace ranzcr
