// Text taken from a file (a CSV field, a YAML value, a name inside an archive) for a one-line message. The
// base room core/ holds this and the check macros (check.h): every other folder may use them.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace ranzcr {

/// `text` with control characters (bytes below 0x20, and 0x7f) written as \xNN, so that it cannot break the
/// message's line, and cut to `max_bytes` (at a UTF-8 character boundary) with "..." after it.
inline std::string printable(std::string_view text, size_t max_bytes = 80) {
  size_t end = text.size();
  if (end > max_bytes) {
    end = max_bytes;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // not mid-character
  }
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return end < text.size() ? out + "..." : out;
}

/// printable(text, max_bytes) in double quotes.
inline std::string in_quotes(std::string_view text, size_t max_bytes = 80) {
  return "\"" + printable(text, max_bytes) + "\"";
}

}  // namespace ranzcr
