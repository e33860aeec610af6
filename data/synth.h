// Synthetic RANZCR-shaped data: chest-radiograph-like images with tubes and lines whose geometry decides
// the 11 labels. The rules are documented in docs/synthetic-data.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "data/data_config.h"

namespace ranzcr {

/// The 11 RANZCR CLiP target columns, in the competition's order.
const std::vector<std::string>& ranzcr_label_names();

struct SynthStudy {
  std::string id;           // StudyInstanceUID
  std::string patient;      // PatientID
  std::vector<int> labels;  // 11 values, 0/1
  cv::Mat image;            // CV_8UC1
  cv::Mat image16;          // CV_16UC1: the same picture at 16 bits, for DICOM
  struct Annotation {
    std::string label;                // one of ranzcr_label_names()
    std::vector<cv::Point> polyline;  // device centre line, image pixels
  };
  std::vector<Annotation> annotations;
};

/// Renders study `index` of a data set (deterministic for (seed, index, patient, size)).
SynthStudy render_study(uint64_t seed, int64_t index, int64_t patient, int image_size, bool test_split);

/// Writes `study`'s 16-bit picture to `path` as a DICOM file of the kind study `index` gets (see
/// generate_synthetic).
void write_synthetic_dicom(const std::string& path, const SynthStudy& study, int64_t index);

/// Writes the Kaggle layout to `out_dir`: train.csv, train/*.jpg, train_annotations.csv, test/*.jpg,
/// sample_submission.csv, plus test_labels.csv (the test set's true labels, which Kaggle keeps hidden).
/// With config.format kDicom the images are .dcm files instead, in five kinds by study index
/// (synthetic_dicom_options): 12-bit JPEG 2000, 12-bit MONOCHROME1 JPEG-LS, 16-bit rescaled JPEG lossless,
/// 16-bit signed MONOCHROME1 RLE and 12-bit uncompressed, each with a window that shows the whole range.
/// Builds in a temporary sibling folder and renames it into place, so an interrupted run leaves no
/// half-written data set. `progress(done, total)` is called from the calling thread now and then.
void generate_synthetic(const std::string& out_dir, const SynthConfig& config, int num_threads,
                        const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace ranzcr
