#include "engine/jobs/thread_usage.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <opencv2/core.hpp>

#include <chrono>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

namespace ranzcr {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long page_faults_so_far() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

const char* const kGroups[] = {"main", "intra-op", "loader", "opencv", "other"};

std::string group_of(int tid, const ThreadTime& t, int main_tid, const std::set<int>& intra,
                     const std::set<int>& opencv) {
  if (tid == main_tid) return "main";
  if (intra.count(tid)) return "intra-op";
  if (t.name == "ranzcr-loader") return "loader";  // and any pool a loader thread started (same name)
  if (opencv.count(tid)) return "opencv";
  return "other";
}

}  // namespace

// at::parallel_for's OpenMP code is in ATen's header, compiled only with -fopenmp, which this project does
// not use (so it would run the task once, on this thread). The team is asked of the OpenMP runtime LibTorch
// loaded instead: GOMP_parallel is libgomp's entry for `#pragma omp parallel` (LLVM's and Intel's runtimes
// provide it too), and the team it starts for this thread is the one LibTorch's operators use. Without it
// (another intra-op backend), no thread is found and LibTorch's count under "other".
std::set<int> intra_op_thread_ids() {
  using Parallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  struct Seen {
    std::mutex mutex;
    std::set<int> ids;
  } seen;
  const auto gomp_parallel = reinterpret_cast<Parallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  if (!gomp_parallel) return {};
  auto record = [](void* data) {
    auto* s = static_cast<Seen*>(data);
    std::lock_guard<std::mutex> lock(s->mutex);
    s->ids.insert(current_tid());
  };
  gomp_parallel(record, &seen, static_cast<unsigned>(at::get_num_threads()), 0);
  return seen.ids;
}

std::set<int> opencv_thread_ids() {
  std::mutex mutex;
  std::set<int> ids;
  // Tasks that sleep a little, so that every thread of the pool takes some.
  cv::parallel_for_(cv::Range(0, 8 * std::max(1, cv::getNumThreads())), [&](const cv::Range&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(current_tid());
  });
  return ids;
}

double SectionUsage::cores() const {
  double cpu = 0.0;
  for (const auto& g : groups) cpu += g.cpu_seconds;
  return wall_seconds > 0.0 ? cpu / wall_seconds : 0.0;
}

ThreadUsage::ThreadUsage()
    : start_(thread_times()),
      start_faults_(page_faults_so_far()),
      start_seconds_(now_seconds()),
      main_tid_(current_tid()) {}

SectionUsage ThreadUsage::finish() const {
  const std::map<int, ThreadTime> end = thread_times();
  SectionUsage usage;
  usage.wall_seconds = now_seconds() - start_seconds_;
  usage.page_faults = page_faults_so_far() - start_faults_;
  const std::set<int> intra = intra_op_thread_ids(), opencv = opencv_thread_ids();
  std::map<std::string, ThreadGroupUsage> by_group;
  static const ThreadTime kNotYetStarted{"", 0.0, 0.0, 0.0};  // a thread that began within the section
  for (const auto& [tid, t] : end) {
    const auto found = start_.find(tid);
    const ThreadTime& before = found != start_.end() ? found->second : kNotYetStarted;
    const double cpu = t.cpu_seconds - before.cpu_seconds;
    if (cpu <= 0.0) continue;
    ThreadGroupUsage& g = by_group[group_of(tid, t, main_tid_, intra, opencv)];
    ++g.threads;
    g.cpu_seconds += cpu;
    g.kernel_seconds += std::max(0.0, t.kernel_seconds - before.kernel_seconds);
    if (t.wait_seconds >= 0.0)
      g.wait_seconds = std::max(0.0, g.wait_seconds) + t.wait_seconds - before.wait_seconds;
  }
  for (const char* name : kGroups) {
    auto it = by_group.find(name);
    if (it == by_group.end()) continue;
    it->second.group = name;
    usage.groups.push_back(it->second);
  }
  return usage;
}

std::string usage_line(const SectionUsage& usage) {
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(2) << usage.cores() << " cores:";
  const double wall = std::max(usage.wall_seconds, 1e-9);
  const char* sep = " ";
  for (const auto& g : usage.groups) {
    ss << sep << g.group << " " << g.cpu_seconds / wall;
    ss << " (";
    if (g.wait_seconds >= 0.0) ss << "waits " << g.wait_seconds / wall << ", ";
    ss << "kernel " << g.kernel_seconds / wall << ")";
    sep = ", ";
  }
  ss << "; " << usage.page_faults << " page faults";
  return ss.str();
}

}  // namespace ranzcr
