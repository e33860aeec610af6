// User-input checks that read like PyTorch's TORCH_CHECK: RANZCR_CHECK(cond, parts...) throws
// std::runtime_error with the parts streamed into one message when `cond` is false, so a message is written
// as a list (RANZCR_CHECK(n > 0, path, ": ", n, " rows; expected at least one")) instead of hand-built
// string concatenation. For bad input from users and files only; internal invariants use
// TORCH_INTERNAL_ASSERT (or assert where LibTorch is not linked). main() prints the message as one
// `error: ...` line. No LibTorch here: the DICOM decoder helper uses these without it.
#pragma once

#include "core/printable.h"

#include <sstream>
#include <stdexcept>
#include <string>

namespace ranzcr {

/// The parts streamed one after the other, as c10::str does (any type with an operator<<).
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  ((out << parts), ...);
  return out.str();
}

namespace detail {

// Messages quote names and values from files: control characters there (a newline in a YAML key or a
// safetensors name) are escaped, so that a message stays one line, and a message stops at 4000 bytes.
[[noreturn]] inline void throw_user_error(const std::string& message) {
  throw std::runtime_error(printable(message, 4000));
}

}  // namespace detail
}  // namespace ranzcr

/// Throws std::runtime_error(ranzcr::str(parts...)) unless `cond` holds.
#define RANZCR_CHECK(cond, ...)                                                  \
  do {                                                                           \
    if (!(cond)) ::ranzcr::detail::throw_user_error(::ranzcr::str(__VA_ARGS__)); \
  } while (0)

/// Throws std::runtime_error(ranzcr::str(parts...)).
#define RANZCR_FAIL(...) ::ranzcr::detail::throw_user_error(::ranzcr::str(__VA_ARGS__))
