// DICOM files written through DCMTK and OpenJPEG (dicom/write.cpp): what the synthetic generator and the
// tests use. Only dicom/*.cpp include DCMTK or OpenJPEG.
#pragma once

#include <opencv2/core.hpp>

#include <string>

namespace ranzcr {

/// How write_dicom stores an image.
struct DicomWriteOptions {
  enum class Syntax { kExplicitLittle, kRle, kJpegLossless, kJpegLsLossless, kJpeg2000Lossless };
  Syntax syntax = Syntax::kExplicitLittle;
  bool monochrome1 = false;  // Photometric Interpretation MONOCHROME1 (the caller inverts the values)
  int bits_stored = 16;      // of 16 allocated
  bool is_signed = false;    // Pixel Representation 1
  double slope = 1.0, intercept = 0.0;                  // Rescale Slope / Intercept
  double window_center = 0.0, window_width = 0.0;       // written when window_width > 0
  std::string study_uid, patient_id, sop_instance_uid;  // identifiers written into the file
};

/// Writes `stored` (CV_16UC1, or CV_16SC1 when options.is_signed: the stored values) as a DX "for
/// presentation" DICOM file. Deterministic: the same input gives the same bytes. Throws
/// std::runtime_error when it cannot be encoded or written.
void write_dicom(const std::string& path, const cv::Mat& stored, const DicomWriteOptions& options);

}  // namespace ranzcr
