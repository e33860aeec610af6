// The DICOM sandbox's cost, side by side: the files of a folder decoded as the loader decodes them
// (decode_dicom_u8 to a target size), by T threads, once in this process and once through the sandboxed
// helpers (decode_dicom_sandboxed: one helper per thread, started on first use), alternating, R rounds each.
// Not a test: docs/benchmarks.md has its output and the command.
//   build/tests/dicom_decode_bench DIR [--threads T] [--rounds R] [--size S]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/dicom_sandbox.h"
#include "dicom/decode.h"

namespace {

using ranzcr::DicomU8;
using ranzcr::DicomWindow;

struct File {
  std::string path;
  std::vector<unsigned char> bytes;
};

// Images per second of `decode` over every file, split over `threads` threads.
template <class Decode>
double images_per_second(const std::vector<File>& files, int threads, int size, Decode decode) {
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < files.size(); i = next++) {
        try {
          if (decode(files[i], size).image.empty()) ++failed;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          ++failed;
        }
      }
    });
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed) std::fprintf(stderr, "%d files failed\n", failed.load());
  return static_cast<double>(files.size()) / s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dicom_decode_bench DIR [--threads T] [--rounds R] [--size S]\n");
    return 2;
  }
  int threads = 2, rounds = 3, size = 256;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--threads") threads = value;
    if (flag == "--rounds") rounds = value;
    if (flag == "--size") size = value;
  }
  std::vector<File> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() != ".dcm") continue;
    std::ifstream in(e.path(), std::ios::binary);
    files.push_back(
        {e.path().string(), {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}});
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.path < b.path; });
  std::printf("%zu DICOM files from %s, %d threads, target size %d\n", files.size(), argv[1], threads, size);
  const auto in_process = [](const File& f, int s) {
    return ranzcr::decode_dicom_u8(f.bytes, f.path, DicomWindow::kFile, s);
  };
  const auto sandboxed = [](const File& f, int s) {
    return ranzcr::decode_dicom_sandboxed(f.bytes, f.path, DicomWindow::kFile, s);
  };
  images_per_second(files, threads, size, sandboxed);  // starts the helpers (and warms the page cache)
  std::vector<double> a, b;
  for (int r = 0; r < rounds; ++r) {
    a.push_back(images_per_second(files, threads, size, in_process));
    b.push_back(images_per_second(files, threads, size, sandboxed));
    std::printf("round %d: in-process %.1f images/s, sandboxed %.1f images/s\n", r + 1, a.back(), b.back());
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  const double ma = a[a.size() / 2], mb = b[b.size() / 2];
  std::printf("median: in-process %.1f images/s, sandboxed %.1f images/s, ratio %.3f\n", ma, mb, mb / ma);
  return 0;
}
