// Log lines to stdout and to the run's log file, on the main rank only. On a terminal the training
// progress is one line redrawn in place; in logs and pipes it is a line per record.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>

namespace ranzcr {

class RunLog {
 public:
  /// `enabled` false (non-main ranks) makes every call a no-op. Progress is redrawn in place when stdout
  /// is a terminal (and TERM is not "dumb").
  explicit RunLog(bool enabled = true)
      : RunLog(enabled, std::cout, std::cerr, enabled && stdout_is_terminal()) {}
  /// Tests: explicit streams and terminal mode.
  RunLog(bool enabled, std::ostream& out, std::ostream& err, bool terminal)
      : enabled_(enabled), out_(out), err_(err), terminal_(terminal) {}
  /// Also append to `path` from now on, instead of the file opened before (one run after another, as
  /// the folds of `cv`, each get their own log file).
  void open_file(const std::string& path) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_.is_open()) file_.close();
    file_.clear();
    file_.open(path, std::ios::app);
  }
  /// Stops appending to the file (stdout and stderr go on).
  void close_file() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_.is_open()) file_.close();
  }
  void info(const std::string& msg) { emit(out_, "", msg); }
  void warn(const std::string& msg) { emit(err_, "warning: ", msg); }
  /// A progress record: on a terminal `live` replaces the previous one in place; elsewhere `line` is
  /// printed like info(). The log file always gets `line`.
  void progress(const std::string& live, const std::string& line) {
    if (!enabled_) return;
    if (!terminal_) return info(line);
    std::lock_guard<std::mutex> lock(mutex_);
    out_ << "\r" << live << "\033[K" << std::flush;
    live_ = true;
    to_file("", line);
  }
  bool enabled() const { return enabled_; }
  bool terminal() const { return terminal_; }

 private:
  static bool stdout_is_terminal() {
    const char* term = std::getenv("TERM");
    return ::isatty(STDOUT_FILENO) && !(term && std::string(term) == "dumb");
  }
  void emit(std::ostream& os, const char* prefix, const std::string& msg) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_) out_ << "\r\033[K" << std::flush;  // the next progress record redraws it
    live_ = false;
    os << prefix << msg << std::endl;
    to_file(prefix, msg);
  }
  void to_file(const char* prefix, const std::string& msg) {
    if (!file_) return;
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
    file_ << "[" << stamp << "] " << prefix << msg << std::endl;
  }
  bool enabled_;
  std::ostream& out_;
  std::ostream& err_;
  bool terminal_;
  bool live_ = false;  // a progress line is on the terminal, unterminated
  std::ofstream file_;
  std::mutex mutex_;
};

}  // namespace ranzcr
