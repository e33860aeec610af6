// Lists of names written as one piece of text: "a, b, c" in a message, or one name a line in a file.
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

}  // namespace ranzcr
