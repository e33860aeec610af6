// Where a timed section's CPU went, by thread group: the main thread, LibTorch's intra-op threads, the
// loader's threads, OpenCV's pool and the rest; each group's CPU time, its wait for a core and its time in
// the kernel, and the process's page faults (`bench`).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/thread_times.h"

namespace ranzcr {

struct ThreadGroupUsage {
  std::string group;            // main | intra-op | loader | opencv | other
  int threads = 0;              // threads of the group that ran in the section
  double cpu_seconds = 0.0;     // on a core
  double wait_seconds = -1.0;   // runnable, waiting for a core (-1: the kernel has no schedstats)
  double kernel_seconds = 0.0;  // of cpu_seconds, in the kernel: page faults, system calls (clock ticks)
};

struct SectionUsage {
  double wall_seconds = 0.0;
  long page_faults = 0;                  // the process's, in the section (minor and major)
  std::vector<ThreadGroupUsage> groups;  // in the order above; groups that used no CPU left out
  double cores() const;                  // CPU seconds of every group per wall second
};

/// Measures one section: construct at its start (after the pools exist), finish() at its end.
class ThreadUsage {
 public:
  ThreadUsage();
  SectionUsage finish() const;

 private:
  std::map<int, ThreadTime> start_;
  long start_faults_;
  double start_seconds_;
  int main_tid_;
};

/// The thread ids of LibTorch's intra-op pool and of OpenCV's, asked of the pools themselves (each runs a
/// task on every one of its threads). Threads are grouped by these, the loader's by name ("ranzcr-loader").
std::set<int> intra_op_thread_ids();
std::set<int> opencv_thread_ids();

/// One line per group: "main 0.98 (waits 0.01, kernel 0.02), ..." as a share of the wall time, and the
/// section's page faults.
std::string usage_line(const SectionUsage& usage);

}  // namespace ranzcr
