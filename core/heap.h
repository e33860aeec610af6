// The C heap's policy for a process that trains or predicts: keep freed memory for the next step.
#pragma once

#include <climits>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ranzcr {

/// A training or inference step frees and allocates again the same large tensors every step (resnet18's
/// activations at 256 px and batch 32 are 17-134 MB each). glibc serves a block above its mmap threshold
/// (which it raises to 32 MB at most) with a fresh mmap and gives it back with munmap when it is freed, so
/// each step the kernel faults in and zeroes those pages again: 10.7 million page faults and 33 s of kernel
/// time in a 100 s `ranzcr bench` of resnet18 (docs/benchmarks.md, issue 54). This keeps every freed block
/// in the heap for reuse instead: no block is mmapped on its own (M_MMAP_MAX 0; a block too large for a
/// thread's heap still is) and the heap's top is not trimmed (M_TRIM_THRESHOLD as large as it goes). The
/// process then holds its peak memory until it exits. The values computed do not change.
///
/// Unless GLIBC_TUNABLES sets any glibc.malloc tunable: then the user's settings stand and nothing is
/// changed. False when nothing was changed (that, or not glibc).
inline bool keep_freed_heap_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

}  // namespace ranzcr
