// Files that are either whole or absent: a crash, a full disk or a kill mid-write never leaves half a
// checkpoint, config, metrics line or spooled request behind. Header-only (no LibTorch): engine/ and
// tracking/ share it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/check.h"
#include "core/write_all.h"

namespace ranzcr {

/// Writes `bytes` to `path` atomically: temporary file in the same folder (made when missing), fsync,
/// rename, fsync of the folder. Throws std::runtime_error naming the file when it cannot (the temporary
/// file removed again).
inline void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RANZCR_CHECK(fd >= 0, "cannot write ", tmp, ": ", std::strerror(errno));
  if (!write_all(fd, bytes.data(), bytes.size())) {
    const std::string err = errno == 0 ? "no byte written" : std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    RANZCR_FAIL("cannot write ", tmp, ": ", err);
  }
  // errno is read before the clean-up calls can change it; the descriptor is closed even when fsync fails.
  const int sync_error = ::fsync(fd) != 0 ? errno : 0;
  const int close_error = ::close(fd) != 0 ? errno : 0;
  if (sync_error || close_error) {
    ::unlink(tmp.c_str());
    RANZCR_FAIL("cannot flush ", tmp, ": ", std::strerror(sync_error ? sync_error : close_error));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(tmp.c_str());
    RANZCR_FAIL("cannot rename ", tmp, " to ", path, ": ", std::strerror(rename_error));
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

/// Appends `line` (with its newline) to `path` in one write (O_APPEND: the lines of concurrent writers do
/// not interleave) and fsyncs it. Throws std::runtime_error naming the file when it cannot be opened or
/// written (a partial write is cut off again).
inline void append_line(const std::string& path, const std::string& line) {
  const std::string text = line + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  RANZCR_CHECK(fd >= 0, "cannot append to ", path, ": ", std::strerror(errno));
  const off_t before = ::lseek(fd, 0, SEEK_END);
  ssize_t n;
  do {
    n = ::write(fd, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  std::string why;
  if (n < 0)
    why = std::strerror(errno);
  else if (n != static_cast<ssize_t>(text.size()))
    why = "short write (disk full?)";
  else if (::fsync(fd) != 0)
    why = std::strerror(errno);
  if (!why.empty()) {
    if (before >= 0 && n > 0) (void)!::ftruncate(fd, before);  // no half line left behind
    ::close(fd);
    RANZCR_FAIL("cannot append to ", path, ": ", why);
  }
  ::close(fd);
}

}  // namespace ranzcr
