// Shared pieces of the fuzz targets (fuzz/targets/*.cpp). Each target defines LLVMFuzzerTestOneInput and
// checks the project's promise about a file from elsewhere: it is read, or refused with one std::exception
// whose message is one line naming the file. Anything else (a crash, a sanitizer report, a leak, an
// exception of another kind, a multi-line or anonymous message) aborts, so libFuzzer reports the input.
// The same sources build without clang as replay programs (replay_main.cpp) that ctest runs over the
// checked-in corpus and regression inputs.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace ranzcr::fuzz {

/// Whether refusals are printed (the replay programs print them, libFuzzer runs do not).
extern bool print_refusals;

/// Prints what broke the promise and aborts (libFuzzer saves the input as a crash).
[[noreturn]] void violation(const std::string& what, const std::string& message);

/// Checks a refusal's message: non-empty, one line, and naming `name` unless `name` is empty.
void check_refusal(const std::string& message, const std::string& name);

/// Runs `read`: returning is fine; a std::exception must pass check_refusal; a c10::Error (LibTorch's
/// own error, whose text is internal and spans lines) escaping to the caller is a violation, as is any
/// other exception.
template <class Read>
void expect_read_or_refused(Read&& read, const std::string& name) {
  try {
    read();
  } catch (const c10::Error& e) {
    violation("c10::Error escaped (callers print one line of it, unnamed)", e.what_without_backtrace());
  } catch (const std::exception& e) {
    check_refusal(e.what(), name);
  } catch (...) {
    violation("an exception that is not a std::exception", "");
  }
}

/// A file in this process's scratch folder (tmpfs when there is one), named `name` (e.g. "in.pt"),
/// holding `data`. Returns its path; the folder is removed at exit.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);

/// The input as a string.
inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace ranzcr::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
