// Text taken from a file (a CSV field, a YAML value, a name inside an archive) for a one-line message. In
// core/, the lowest folder, with the check macros (check.h): every other folder may use them.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace ranzcr {

namespace detail {

// `text` cut to `max_bytes` ("..." after it), the bytes `escape` selects written as \xNN.
template <class Escape>
std::string escaped(std::string_view text, size_t max_bytes, bool utf8, Escape escape) {
  size_t end = text.size();
  if (end > max_bytes) {
    end = max_bytes;
    while (utf8 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
      --end;  // not mid-character
  }
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!escape(c)) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return end < text.size() ? out + "..." : out;
}

}  // namespace detail

/// `text` with control characters (bytes below 0x20, and 0x7f) written as \xNN, so that it cannot break the
/// message's line, and cut to `max_bytes` (at a UTF-8 character boundary) with "..." after it.
inline std::string printable(std::string_view text, size_t max_bytes = 80) {
  return detail::escaped(text, max_bytes, /*utf8=*/true,
                         [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

/// A name from an untrusted binary file (a zip entry) in double quotes: every byte but printable ASCII, and
/// the quote and backslash, written as \xNN (such names need not be text at all), cut to `max_bytes`.
inline std::string in_quotes(std::string_view text, size_t max_bytes = 64) {
  return "\"" +
         detail::escaped(text, max_bytes, /*utf8=*/false,
                         [](unsigned char c) { return c < 0x20 || c >= 0x7f || c == '"' || c == '\\'; }) +
         "\"";
}

}  // namespace ranzcr
