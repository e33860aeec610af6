// Writing a whole buffer to a file descriptor: write(2) and pwrite(2) may write less than asked, or be
// interrupted by a signal before writing anything (EINTR).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace ranzcr {

namespace detail {

/// Calls `write_some(p, n, done)` (write up to n bytes from p; `done` bytes are already written) until all of
/// `size` bytes are written, again after EINTR. False with errno set when a call fails, or with errno 0
/// when one writes nothing.
template <class WriteSome>
bool write_all_with(const void* data, size_t size, WriteSome write_some) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write_some(p + done, size - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace detail

/// Writes all `size` bytes of `data` to `fd`, retried after EINTR and short writes. False when it could not:
/// errno says why, or is 0 when a write wrote nothing (a full disk, for one) without an error.
inline bool write_all(int fd, const void* data, size_t size) {
  return detail::write_all_with(data, size,
                                [fd](const char* p, size_t n, size_t) { return ::write(fd, p, n); });
}

/// write_all at byte `offset` of `fd` (pwrite: the file offset is not used or moved).
inline bool pwrite_all(int fd, const void* data, size_t size, uint64_t offset) {
  return detail::write_all_with(data, size, [fd, offset](const char* p, size_t n, size_t done) {
    return ::pwrite(fd, p, n, static_cast<off_t>(offset + done));
  });
}

}  // namespace ranzcr
