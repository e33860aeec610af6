// User-input checks that read like PyTorch's TORCH_CHECK: RANZCR_CHECK(cond, parts...) throws
// std::runtime_error with the parts formatted by c10::str when `cond` is false, so a message is written
// as a list (RANZCR_CHECK(n > 0, path, ": ", n, " rows; expected at least one")) instead of hand-built
// string concatenation. For bad input from users and files only; internal invariants use
// TORCH_INTERNAL_ASSERT. main() prints the message as one `error: ...` line.
#pragma once

#include <c10/util/StringUtil.h>

#include "data/printable.h"

#include <stdexcept>
#include <string>

namespace ranzcr::detail {

// Messages quote names and values from files: control characters there (a newline in a YAML key or a
// safetensors name) are escaped, so that a message stays one line, and a message stops at 4000 bytes.
[[noreturn]] inline void throw_user_error(const std::string& message) {
  throw std::runtime_error(printable(message, 4000));
}

}  // namespace ranzcr::detail

/// Throws std::runtime_error(c10::str(parts...)) unless `cond` holds.
#define RANZCR_CHECK(cond, ...)                                               \
  do {                                                                        \
    if (!(cond)) ::ranzcr::detail::throw_user_error(::c10::str(__VA_ARGS__)); \
  } while (0)

/// Throws std::runtime_error(c10::str(parts...)).
#define RANZCR_FAIL(...) ::ranzcr::detail::throw_user_error(::c10::str(__VA_ARGS__))
