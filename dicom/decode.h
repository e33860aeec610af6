// DICOM images through DCMTK and OpenJPEG: a single-frame greyscale image to float [0, 1] at full bit
// depth (the writer the synthetic generator uses: dicom/write.h). Only dicom/*.cpp include DCMTK or OpenJPEG.
#pragma once

#include <opencv2/core.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "dicom/window.h"

namespace ranzcr {

/// Registers DCMTK's codecs, silences its log and loads its data dictionary (Debian's DCMTK reads it from
/// a file on first use). Every function here and write_dicom call it; ranzcr-dicom-decoder calls it before it
/// locks itself down, after which it could open no file. Thread-safe, once.
void init_dicom_library();

/// True when `bytes` hold a DICOM preamble: "DICM" at byte 128.
bool has_dicom_preamble(const unsigned char* bytes, size_t size);

/// True when `path` ends in .dcm or .dicom (any case).
bool has_dicom_extension(const std::string& path);

/// Decodes the single-frame greyscale image of a DICOM file to CV_32FC1 in [0, 1]:
///   stored pixels (masked to Bits Stored, sign-extended when signed)
///   -> modality: the Modality LUT Sequence, else Rescale Slope/Intercept
///   -> VOI (`window`): kFile: the file's first VOI LUT, else its first Window Center/Width (VOI LUT
///      Function LINEAR, LINEAR_EXACT or SIGMOID), else the image's min..max; kMinMax: min..max;
///      kPercentile: the 1st..99th percentile, clipped
///   -> MONOCHROME1 inverted (1 - v).
/// `bytes` is the whole file, `name` its path for messages. Throws std::runtime_error with one line naming
/// the file and what it holds when it is not DICOM, holds no image (e.g. a structured report), a colour or
/// multi-frame image, truncated pixel data, or a transfer syntax it cannot decode.
cv::Mat decode_dicom(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window);

/// A DICOM image as the loader takes it: 8 bits, and the file's own size.
struct DicomU8 {
  cv::Mat image;           // CV_8UC1
  cv::Size original_size;  // the decoded image's size before the reduction
};

/// decode_dicom, then shrunk at full depth by the largest integer factor that keeps the shorter side >=
/// `target_size` (area average) and rounded to 8 bits. What ranzcr-dicom-decoder runs for the loader.
DicomU8 decode_dicom_u8(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window,
                        int target_size);

}  // namespace ranzcr
