// How many pixels an image file may make a decoder allocate, against the file's own size: a small file must
// not make OpenCV, DCMTK or OpenJPEG allocate gigabytes (docs/security.md). Shared by the JPEG/PNG and DICOM
// readers.
#pragma once

#include <cstdint>
#include <string>

namespace ranzcr {

/// No image has more pixels than this (16384 x 16384).
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;
/// Any file may declare up to this many pixels (4096 x 4096).
constexpr int64_t kFreeImagePixels = int64_t{1} << 24;
/// Above kFreeImagePixels a file holds at least one byte per this many pixels: compressed at most 128:1 (8
/// bits) or 256:1 (16 bits), where lossless codecs reach 2-4:1 on radiographs and diagnostic lossy ones
/// 10-50:1. A 43 x 43 cm detector at 0.1 mm (4300 x 4300) needs 145 KB; it is stored in megabytes.
constexpr int64_t kPixelsPerFileByte = 128;

/// Whether a `width` x `height` image is within kMaxImagePixels (each side at least 1; no overflow).
inline bool pixel_count_within_limit(int64_t width, int64_t height) {
  return width > 0 && height > 0 && width <= kMaxImagePixels / height;
}

/// Empty when a file of `file_size` bytes may declare a `width` x `height` image, else what is wrong, to
/// follow the file's name: "declares W x H pixels ..., expected ...".
inline std::string pixel_count_problem(int64_t width, int64_t height, uint64_t file_size) {
  const std::string declared =
      "declares " + std::to_string(width) + " x " + std::to_string(height) + " pixels";
  if (!pixel_count_within_limit(width, height))
    return declared + ", expected 1 to 268 million (16384 x 16384)";
  if (width * height > kFreeImagePixels &&
      static_cast<uint64_t>(width * height / kPixelsPerFileByte) > file_size)
    return declared + " in a file of " + std::to_string(file_size) +
           " bytes, expected at least 1 byte per 128 pixels above 16.8 million pixels (4096 x 4096)";
  return {};
}

}  // namespace ranzcr
