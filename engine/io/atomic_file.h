// Files that are either whole or absent: a crash, a full disk or a kill mid-write never leaves half a
// checkpoint, config or metrics line behind.
#pragma once

#include <string>

namespace ranzcr {

/// Writes `bytes` to `path` atomically: temporary file in the same folder, fsync, rename, fsync folder.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Appends `line` (with its newline) to `path` in one write and fsyncs it. Throws std::runtime_error
/// naming the file when it cannot be opened or written (a partial write is cut off again).
void append_line(const std::string& path, const std::string& line);

}  // namespace ranzcr
