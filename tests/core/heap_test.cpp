#include "core/heap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include <malloc.h>

namespace ranzcr {
namespace {

// How many blocks glibc holds as mmaps of their own, after allocating (and touching) `bytes` in this thread;
// the block is freed again.
size_t mmapped_blocks_with(size_t bytes) {
  char* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) return SIZE_MAX;
  std::memset(p, 1, bytes);
  __asm__ volatile("" : : "r"(p) : "memory");  // the allocation is not optimised away
  const size_t blocks = mallinfo2().hblks;
  std::free(p);
  return blocks;
}

constexpr size_t k64MB = size_t{64} << 20;  // above glibc's largest mmap threshold (32 MB)

// In a child process (EXPECT_EXIT forks): the policy is the whole process's.
TEST(Heap, KeepsLargeBlocksInTheHeapForReuse) {
  EXPECT_EXIT(
      {
        unsetenv("GLIBC_TUNABLES");
        const size_t before = mallinfo2().hblks;
        const bool mmapped_by_default = mmapped_blocks_with(k64MB) == before + 1;
        const bool kept = keep_freed_heap_memory();
        const bool in_heap = mmapped_blocks_with(k64MB) == before;
        const size_t heap = mallinfo2().arena;  // the main heap now holds the freed 64 MB, untrimmed
        std::exit(mmapped_by_default && kept && in_heap && heap >= k64MB ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Heap, LeavesTheUsersGlibcMallocTunablesAlone) {
  EXPECT_EXIT(
      {
        setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576", 1);
        const size_t before = mallinfo2().hblks;
        const bool kept = keep_freed_heap_memory();
        std::exit(!kept && mmapped_blocks_with(k64MB) == before + 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("GLIBC_TUNABLES", "glibc.rtld.nns=2", 1);  // no malloc tunable: the policy applies
        std::exit(keep_freed_heap_memory() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ranzcr
