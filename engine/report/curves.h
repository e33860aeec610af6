// Training curves as PNG images in the run folder (run_folder::curves_files), drawn with OpenCV (core,
// imgproc, imgcodecs) from the run's metrics: train and validation loss per epoch, mean validation AUC per
// epoch, and validation AUC per label per epoch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/report/metrics_writer.h"

namespace ranzcr {

constexpr int kCurvesWidth = 1200, kCurvesHeight = 600;  // pixels of every PNG

/// Redraws the PNGs of `run_dir` from its metrics file (each written atomically) and returns their
/// paths. Throws std::runtime_error when the folder has no metrics file.
std::vector<std::string> write_curves(const std::string& run_dir);

/// Redraws the curves after every epoch record (add it after the metrics file's writer).
std::unique_ptr<MetricsWriter> make_curves_writer(const std::string& run_dir);

}  // namespace ranzcr
