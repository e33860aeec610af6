// The synthetic data set as DICOM: each study's 16-bit picture stored in one of five kinds of file, so the
// quickstart on it goes through every decoder and VOI step the loader has.
#include <opencv2/core.hpp>

#include <string>

#include "data/synth.h"
#include "dicom/write.h"

namespace ranzcr {

namespace {

// Study i's kind of file, and its stored values for `picture` (CV_16UC1). Every window shows the whole
// range, so the decoded image is picture / 65535 (to 12-bit rounding) in each kind.
DicomWriteOptions synthetic_dicom_options(int64_t i) {
  using S = DicomWriteOptions::Syntax;
  DicomWriteOptions o;
  switch (i % 5) {
    case 0:  // 12-bit MONOCHROME2, JPEG 2000 lossless
      o.syntax = S::kJpeg2000Lossless, o.bits_stored = 12, o.window_center = 2048, o.window_width = 4096;
      break;
    case 1:  // 12-bit MONOCHROME1, JPEG-LS lossless
      o.syntax = S::kJpegLsLossless, o.bits_stored = 12, o.monochrome1 = true;
      o.window_center = 2048, o.window_width = 4096;
      break;
    case 2:  // 16-bit MONOCHROME2 rescaled to 0.5 * stored - 1024, JPEG lossless (process 14)
      o.syntax = S::kJpegLossless, o.bits_stored = 16, o.slope = 0.5, o.intercept = -1024;
      o.window_center = 15360.25, o.window_width = 32768.5;
      break;
    case 3:  // 16-bit signed MONOCHROME1 rescaled by +32768, RLE
      o.syntax = S::kRle, o.bits_stored = 16, o.is_signed = true, o.monochrome1 = true, o.intercept = 32768;
      o.window_center = 32768, o.window_width = 65536;
      break;
    default:  // 12-bit MONOCHROME2, uncompressed
      o.bits_stored = 12, o.window_center = 2048, o.window_width = 4096;
  }
  return o;
}

cv::Mat stored_values(const cv::Mat& picture, const DicomWriteOptions& o) {
  cv::Mat out;
  if (o.is_signed) {  // MONOCHROME1: 32767 - v
    picture.convertTo(out, CV_32S);
    out = 32767 - out;
    out.convertTo(out, CV_16S);
  } else if (o.bits_stored == 12) {
    cv::Mat v12;
    picture.convertTo(v12, CV_32S);
    v12.forEach<int>([](int& v, const int*) { v >>= 4; });
    if (o.monochrome1) v12 = 4095 - v12;
    v12.convertTo(out, CV_16U);
  } else {
    out = picture.clone();
  }
  return out;
}

}  // namespace

void write_synthetic_dicom(const std::string& path, const SynthStudy& study, int64_t index) {
  DicomWriteOptions o = synthetic_dicom_options(index);
  o.study_uid = study.id;
  o.sop_instance_uid = study.id + ".1.1";
  o.patient_id = study.patient;
  write_dicom(path, stored_values(study.image16, o), o);
}

}  // namespace ranzcr
