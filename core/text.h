// Lists of names written as one piece of text: "a, b, c" in a message, or one name a line in a file; the
// first line of a longer text (an exception's message, whose backtrace follows on the next lines); a
// suffix test.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ranzcr {

/// The `parts` one after another with `separator` between each two of them ("" for none).
inline std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

/// Whether `s` ends with `suffix`.
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// `s` up to its first newline (all of it when it has none).
inline std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

}  // namespace ranzcr
