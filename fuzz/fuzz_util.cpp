#include "fuzz/fuzz_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

namespace fs = std::filesystem;

namespace ranzcr::fuzz {
namespace {

// The scratch folder, made on first use and removed at exit.
class Scratch {
 public:
  Scratch() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir_ = base / ("ranzcr-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

bool print_refusals = false;

void violation(const std::string& what, const std::string& message) {
  std::fprintf(stderr, "\n==ranzcr-fuzz== promise broken: %s\n==ranzcr-fuzz== message: %s\n", what.c_str(),
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

void check_refusal(const std::string& message, const std::string& name) {
  if (message.empty()) violation("an error without a message", message);
  if (message.find('\n') != std::string::npos) violation("an error message of several lines", message);
  if (!name.empty() && message.find(name) == std::string::npos)
    violation("an error message that does not name the file " + name, message);
  if (print_refusals) std::fprintf(stderr, "  refused: %s\n", message.c_str());
}

std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  static const Scratch scratch;
  const std::string path = (scratch.dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) violation("cannot write the scratch file " + path, "");
  return path;
}

}  // namespace ranzcr::fuzz
