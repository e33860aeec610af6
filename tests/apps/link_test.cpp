// How every executable of the project is linked (the top-level CMakeLists.txt): std::filesystem must come
// from libstdc++ itself, not from the strong copies that PyPI's torch wheels export from libtorch.so and
// libtorch_cpu.so (pytorch/pytorch#133437), which crash when called (torch 2.11.0+cu130: a jump to 0 in
// std::filesystem::remove_all). This binary is linked like `ranzcr` and the other test binaries.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

std::string object_defining(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

TEST(Linking, StdFilesystemResolvesToLibstdcxx) {
  using RemoveAll = std::uintmax_t (*)(const fs::path&);
  const auto remove_all = static_cast<RemoveAll>(&fs::remove_all);
  const std::string where = object_defining(reinterpret_cast<const void*>(remove_all));
  // libstdc++.so, or this executable itself where the compiler's libstdc++ is a static archive.
  const bool from_libstdcxx = where.find("libstdc++") != std::string::npos;
  std::error_code ec;
  const bool from_this_binary = fs::equivalent(where, "/proc/self/exe", ec);
  EXPECT_TRUE(from_libstdcxx || from_this_binary) << "std::filesystem::remove_all comes from " << where;
  EXPECT_EQ(where.find("libtorch"), std::string::npos) << where;

  // And it works: a folder with a file in it is gone.
  const fs::path dir = fs::temp_directory_path() / ("ranzcr_link_test_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "file.txt") << "x";
  EXPECT_EQ(fs::remove_all(dir), 3u);
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace ranzcr
