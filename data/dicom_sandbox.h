// DICOM files decoded in ranzcr-dicom-decoder, a helper process beside `ranzcr` (dicom/decoder_main.cpp):
// the DICOM library and its codecs never run in the trainer. A helper links no LibTorch, bounds its own
// memory (RLIMIT_AS, set by the value the loader passes) and locks itself down with seccomp before it reads
// a byte of a file (dicom/lockdown.h); the loader bounds its time per image and kills it on expiry.
// Helpers are started lazily, one per thread decoding at once, and reused; one that dies is replaced for
// the next image. docs/security.md says what this promises.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "data/data_config.h"
#include "dicom/decode.h"

namespace ranzcr {

struct DicomSandboxLimits {
  double seconds_per_image = 10.0;          // from the request's first byte to the reply's last
  int64_t memory_bytes = int64_t{2} << 30;  // the helper's address space (it maps no CUDA libraries)
};

/// The helper could not be found, started or locked down. Not the fault of one file, so the loader does not
/// skip it under data.skip_bad_images: the run stops with this message.
class DicomSandboxUnavailable : public std::exception {
 public:
  explicit DicomSandboxUnavailable(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

/// decode_dicom_u8 of `bytes` (the whole file; `name` its path for messages) in a helper process. Throws
/// std::runtime_error with one line "DICOM file NAME: ..." when the file is refused, or when the helper
/// crashes on it ("the DICOM decoder crashed (SIGSEGV)"), is killed by its filter, runs out of its memory
/// or its time; DicomSandboxUnavailable when no helper can run.
DicomU8 decode_dicom_sandboxed(const std::vector<unsigned char>& bytes, const std::string& name,
                               DicomWindow window, int target_size, const DicomSandboxLimits& limits = {});

/// Where the helper is: ranzcr-dicom-decoder beside this process's executable, else the one this build made.
/// Throws DicomSandboxUnavailable naming both places when neither exists.
std::string dicom_decoder_path();

}  // namespace ranzcr
