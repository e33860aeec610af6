#include "engine/serve/http_message.h"

#include <nlohmann/json.hpp>

#include <strings.h>
#include <stdexcept>

namespace ranzcr {

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [key, value] : headers)
    if (strcasecmp(key.c_str(), name.c_str()) == 0) return value;
  return "";
}

std::vector<std::string> HttpRequest::params(const std::string& name) const {
  std::vector<std::string> out;
  for (const auto& [key, value] : query)
    if (key == name) out.push_back(value);
  return out;
}

std::string json_error(const std::string& message) {
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = json_error(message);
  return r;
}

bool valid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned int cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;  // a continuation byte first, or 0xF8..0xFF
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decoded `text`, checked: a bad escape, invalid UTF-8 or a NUL is std::invalid_argument naming `what`.
std::string decoded(const std::string& text, bool plus_is_space, const char* what) {
  std::string out;
  if (!percent_decode(text, plus_is_space, out))
    throw std::invalid_argument(std::string("bad percent escape in the ") + what);
  if (!valid_utf8(out)) throw std::invalid_argument(std::string("the ") + what + " is not valid UTF-8");
  if (out.find('\0') != std::string::npos)
    throw std::invalid_argument(std::string("the ") + what + " holds a NUL byte");
  return out;
}

}  // namespace

bool percent_decode(const std::string& text, bool plus_is_space, std::string& out) {
  out.clear();
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return false;
      const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(plus_is_space && c == '+' ? ' ' : c);
    }
  }
  return true;
}

void split_target(const std::string& target, std::string& path,
                  std::vector<std::pair<std::string, std::string>>& query) {
  if (!valid_utf8(target)) throw std::invalid_argument("the request target is not valid UTF-8");
  const size_t q = target.find('?');
  path = decoded(target.substr(0, q), false, "path");
  query.clear();
  if (q == std::string::npos) return;
  const std::string rest = target.substr(q + 1);
  for (size_t at = 0; at <= rest.size();) {
    size_t end = rest.find('&', at);
    if (end == std::string::npos) end = rest.size();
    const std::string pair = rest.substr(at, end - at);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      query.emplace_back(decoded(pair.substr(0, eq), true, "query"),
                         eq == std::string::npos ? "" : decoded(pair.substr(eq + 1), true, "query"));
    }
    at = end + 1;
  }
}

}  // namespace ranzcr
