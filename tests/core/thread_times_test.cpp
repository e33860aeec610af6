#include "core/thread_times.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

namespace ranzcr {
namespace {

// A stat line of a thread whose name holds spaces and parentheses: the fields count from the last ")".
TEST(ThreadTimes, ReadsUserAndKernelTicksAfterTheName) {
  const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  const std::string stat =
      "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 300 25 0 0 20 0 3 0 12345 1000 200 18446744073709551615\n";
  EXPECT_DOUBLE_EQ(detail::stat_cpu_seconds(stat), 325 * tick);
  EXPECT_DOUBLE_EQ(detail::stat_kernel_seconds(stat), 25 * tick);
  EXPECT_EQ(detail::stat_kernel_seconds("garbage"), 0.0);
  EXPECT_EQ(detail::stat_kernel_seconds("1 (x)"), 0.0);
}

// Faulting in fresh pages is the kernel's work, and it shows in the thread that touched them.
TEST(ThreadTimes, PageFaultsCountAsTheThreadsKernelTime) {
  const auto kernel_now = [] { return thread_times().at(current_tid()).kernel_seconds; };
  const double before = kernel_now();
  const size_t bytes = size_t{256} << 20;
  for (int round = 0; round < 8 && kernel_now() - before < 0.05; ++round) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, 1, bytes);  // 65536 page faults, each a zeroed page
    ::munmap(p, bytes);
  }
  const auto now = thread_times().at(current_tid());
  EXPECT_GE(now.kernel_seconds - before, 0.05);
  EXPECT_LE(now.kernel_seconds, now.cpu_seconds + 0.05);  // a part of the thread's CPU time (ticks vs ns)
}

}  // namespace
}  // namespace ranzcr
