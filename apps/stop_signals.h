// SIGINT/SIGTERM for jobs: the first one sets a flag the trainer polls (save soon, then stop); repeats
// from our parent or within kSignalRepeatSeconds are ignored, a later insisting one stops at once.
#pragma once

#include <atomic>

namespace ranzcr {

/// Installs the handlers for SIGINT and SIGTERM.
void install_stop_handlers();

/// The flag they set: the first signal's number, 0 until one came.
const std::atomic<int>& stop_signal();

}  // namespace ranzcr
