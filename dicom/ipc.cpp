#include "dicom/ipc.h"

#include <unistd.h>

#include <cerrno>

namespace ranzcr::dicom_ipc {

bool read_exactly(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace ranzcr::dicom_ipc
