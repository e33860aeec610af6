// Options of the data library: data set layout, augmentation and the synthetic generator.
// Part of the YAML config (engine/config/config.h); kept here so data/ does not depend on the engine.
#pragma once

#include <string>
#include <vector>

#include "dicom/window.h"

namespace ranzcr {

struct AugmentConfig {
  bool hflip = true;         // random horizontal flip, p = 0.5
  double rotate_deg = 8.0;   // uniform rotation in [-rotate_deg, rotate_deg]
  double shift = 0.05;       // translation, fraction of the image side
  double scale = 0.08;       // zoom in [1 - scale, 1 + scale]
  double brightness = 0.15;  // additive brightness, fraction of full range
  double contrast = 0.15;    // multiplicative contrast in [1 - c, 1 + c]
  bool clahe = false;        // contrast-limited adaptive histogram equalisation (train and eval)
};

/// data.dicom: how DICOM files are decoded. They are decoded in a sandboxed helper process
/// (data/dicom_sandbox.h), which is stopped and replaced when one image takes longer or more memory.
struct DicomConfig {
  DicomWindow window = DicomWindow::kFile;
  double timeout_seconds = 10.0;  // per image, from the request to the decoded image
  int memory_limit_mb = 2048;     // the helper's address space
};

struct DataConfig {
  std::string root = "datasets/synthetic";     // data set folder (Kaggle layout)
  std::string train_csv = "train.csv";         // labels CSV, relative to root
  std::string image_dir = "train";             // image folder, relative to root
  std::string image_ext = ".jpg";              // image file = image_dir/<id><image_ext>
  std::string id_column = "StudyInstanceUID";  // image id column
  std::string group_column = "PatientID";      // grouping column for the split ("" = no groups)
  std::vector<std::string> label_columns;      // empty = every column but id and group
  int image_size = 256;                        // network input side (square), pixels
  /// Decoded images cached (data/image_cache.h): "off", "on" (a cache/ folder in root) or a folder.
  std::string cache = "off";
  int cache_size = 0;  // prepared (cached) image side; 0: image_size * (1 + augment.scale), rounded up to 32
  double val_fraction = 0.2;     // validation share of groups (when folds == 0)
  int folds = 0;                 // k for GroupKFold (0 = use val_fraction)
  int fold = 0;                  // validation fold index when folds > 0
  int num_workers = 2;           // loader threads (decode + augment)
  int prefetch_batches = 4;      // bounded prefetch queue depth
  bool skip_bad_images = false;  // count and skip unreadable images instead of failing
  std::string annotations_csv = "train_annotations.csv";  // device polylines, relative to root
  bool skip_bad_annotations = false;  // count and skip annotation rows with unknown ids or bad polylines
  AugmentConfig augment;
  DicomConfig dicom;
};

enum class SynthFormat { kJpeg, kDicom };

struct SynthConfig {
  bool generate_if_missing = false;  // create the synthetic data set in `root` if it is absent
  std::string root;           // where the synthetic data set lives (generated only when data.root is it)
  int num_images = 3000;      // training studies
  int num_test_images = 200;  // test studies (test/ + sample_submission.csv)
  int image_size = 512;       // side of the generated images, pixels
  int seed = 7;               // generator seed
  SynthFormat format = SynthFormat::kJpeg;  // image files: JPEG, or DICOM (12/16-bit, MONOCHROME1/2)
};

}  // namespace ranzcr
