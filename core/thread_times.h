// Where a process's CPU goes, thread by thread: each thread's CPU time and the time it waited for a core,
// read from Linux's /proc/self/task/<tid>/schedstat (nanoseconds, exact) or, where the kernel has no
// schedstats, /proc/self/task/<tid>/stat (clock ticks; the wait is then unknown, -1); and the part of it
// spent in the kernel, from the stat file (clock ticks, 10 ms here).
#pragma once

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace ranzcr {

struct ThreadTime {
  std::string name;             // the thread's name (comm), e.g. "ranzcr-loader"
  double cpu_seconds = 0.0;     // on a core
  double wait_seconds = -1.0;   // runnable but waiting for a core (-1: not known)
  double kernel_seconds = 0.0;  // of cpu_seconds, in the kernel (page faults, system calls); clock ticks
};

/// The calling thread's id as /proc names it.
inline int current_tid() {
  return static_cast<int>(::syscall(SYS_gettid));
}

namespace detail {

inline std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Seconds in fields `first`..`last` (clock ticks) of a /proc stat line, counted from 1 (14: utime, 15:
// stime), after the ")" that ends the name (which may hold spaces and parentheses).
inline double stat_tick_seconds(const std::string& stat, int first, int last) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0.0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0.0;
  for (int i = 3; i <= last && fields >> field; ++i)
    if (i >= first) ticks += std::strtod(field.c_str(), nullptr);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// utime + stime, and stime alone.
inline double stat_cpu_seconds(const std::string& stat) {
  return stat_tick_seconds(stat, 14, 15);
}
inline double stat_kernel_seconds(const std::string& stat) {
  return stat_tick_seconds(stat, 15, 15);
}

}  // namespace detail

/// Every thread of this process now, by thread id. Threads that end between the listing and the reading
/// are left out.
inline std::map<int, ThreadTime> thread_times() {
  std::map<int, ThreadTime> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    const int tid = std::atoi(e->d_name);
    if (tid <= 0) continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name + "/";
    ThreadTime t;
    t.name = detail::read_small_file(base + "comm");
    if (t.name.empty()) continue;  // gone
    if (t.name.back() == '\n') t.name.pop_back();
    const std::string stat = detail::read_small_file(base + "stat");
    t.kernel_seconds = detail::stat_kernel_seconds(stat);
    std::istringstream sched(detail::read_small_file(base + "schedstat"));
    double run_ns = 0.0, wait_ns = 0.0;
    if (sched >> run_ns >> wait_ns) {
      t.cpu_seconds = run_ns * 1e-9;
      t.wait_seconds = wait_ns * 1e-9;
    } else {
      t.cpu_seconds = detail::stat_cpu_seconds(stat);
    }
    out[tid] = t;
  }
  ::closedir(dir);
  return out;
}

}  // namespace ranzcr
