// main() of the replay programs (the normal, non-clang build): runs a fuzz target's
// LLVMFuzzerTestOneInput once over every file named on the command line or found in a folder named
// there, as libFuzzer would with those inputs, and within the limits scripts/fuzz.sh gives libFuzzer: no
// single allocation through operator new over 2 GiB (-malloc_limit_mb; the program aborts, whoever catches
// what would have been thrown), and 10 s an input (SIGALRM ends the process). ctest runs it over
// fuzz/corpus/<target> and fuzz/regressions/<target>, so every input that once broke a parser is read again
// by every CI run.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"

namespace fs = std::filesystem;

// Every operator new of the process (LibTorch's and OpenCV's included: the replacement is global).
void* operator new(std::size_t n) {
  constexpr std::size_t kLimit = std::size_t{2} << 30;
  if (n > kLimit) {
    std::fprintf(stderr, "==ranzcr-fuzz== an allocation of %zu bytes (limit %zu)\n", n, kLimit);
    std::abort();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

int main(int argc, char** argv) {
  ranzcr::fuzz::print_refusals = true;
  std::vector<fs::path> inputs;
  for (int a = 1; a < argc; ++a) {
    const fs::path p(argv[a]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "error: no input file or folder %s\n", argv[a]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "error: no inputs to replay (give files or folders)\n");
    return 2;
  }
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    alarm(10);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    alarm(0);
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
