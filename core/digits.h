// Small decimal numbers written in settings and names (cuda:N, a port, a process count, fold_K).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace ranzcr {

/// `text` as a number when it is 1 to `max_digits` (at most 9) decimal digits, without sign or space;
/// leading zeros are allowed ("01" is 1). nullopt otherwise.
inline std::optional<int> parse_digits(std::string_view text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits || max_digits > 9) return std::nullopt;
  int value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace ranzcr
