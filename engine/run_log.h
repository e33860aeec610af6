// Log lines to stdout and to the run's log file, on the main rank only.
#pragma once

#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>

namespace ranzcr {

class RunLog {
 public:
  /// `enabled` false (non-main ranks) makes every call a no-op.
  explicit RunLog(bool enabled = true) : enabled_(enabled) {}
  /// Also append to `path` from now on.
  void open_file(const std::string& path) {
    if (enabled_) file_.open(path, std::ios::app);
  }
  void info(const std::string& msg) { emit(std::cout, "", msg); }
  void warn(const std::string& msg) { emit(std::cerr, "warning: ", msg); }
  bool enabled() const { return enabled_; }

 private:
  void emit(std::ostream& os, const char* prefix, const std::string& msg) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
    os << prefix << msg << std::endl;
    if (file_) file_ << "[" << stamp << "] " << prefix << msg << std::endl;
  }
  bool enabled_;
  std::ofstream file_;
  std::mutex mutex_;
};

}  // namespace ranzcr
