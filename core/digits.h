// Small decimal numbers written in settings and names (cuda:N, a port, a process count, fold folders).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
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

/// The same for larger numbers (a size in bytes, a length): `text` as a number when it is 1 to `max_digits`
/// decimal digits, without sign or space. Up to 18 digits always fit; more that are above INT64_MAX throw
/// std::out_of_range, as std::stoll does.
inline std::optional<int64_t> parse_digits64(std::string_view text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  for (const char c : text)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(std::string(text));
}

}  // namespace ranzcr
