// The wire format between the loader and ranzcr-dicom-decoder, the helper process that decodes DICOM files
// (data/dicom_sandbox.h): one request and one reply per image over a Unix stream socket, little-endian
// fixed-size headers followed by their payloads. Neither side trusts the other's sizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ranzcr::dicom_ipc {

constexpr uint32_t kRequestMagic = 0x31445a52;  // "RZD1"
constexpr uint32_t kReplyMagic = 0x31525a52;    // "RZR1"
/// Longest error message a reply may carry (the loader cuts what it prints further).
constexpr uint32_t kMaxMessage = 4096;
/// Longest file name a request may carry.
constexpr uint32_t kMaxName = 4096;

/// Followed by `name_size` bytes of the file's name (for messages) and `file_size` bytes of the file.
struct Request {
  uint32_t magic = kRequestMagic;
  uint32_t window = 0;      // DicomWindow
  int32_t target_size = 0;  // decode_dicom_u8's target_size
  uint32_t name_size = 0;
  uint64_t file_size = 0;
};

enum class Status : uint32_t {
  kReady = 1,        // the helper has locked itself down (no payload); sent once, first
  kImage = 2,        // followed by cols * rows bytes: the CV_8UC1 image, row by row
  kRefused = 3,      // followed by message_size bytes: one line saying why the file cannot be read
  kSetupFailed = 4,  // the helper could not lock itself down (message says why); it exits after this
};

struct Reply {
  uint32_t magic = kReplyMagic;
  Status status = Status::kRefused;
  int32_t original_cols = 0, original_rows = 0;  // the file's own size (kImage)
  int32_t cols = 0, rows = 0;                    // the image sent (kImage)
  uint32_t message_size = 0;                     // kRefused, kSetupFailed
  uint32_t reserved = 0;
};

/// Blocking read of exactly `size` bytes on `fd` (the helper's side), retried on EINTR and short reads. False
/// on end of file or error. (Its writes: write_all, core/write_all.h.)
bool read_exactly(int fd, void* data, size_t size);

}  // namespace ranzcr::dicom_ipc
