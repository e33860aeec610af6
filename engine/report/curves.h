// Training curves as PNG images in the run folder, drawn with OpenCV (core, imgproc, imgcodecs) from
// metrics.jsonl: curves_loss.png (train and validation loss per epoch), curves_auc.png (mean validation
// AUC per epoch) and curves_auc_per_label.png (validation AUC per label per epoch).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/report/metrics_writer.h"

namespace ranzcr {

constexpr int kCurvesWidth = 1200, kCurvesHeight = 600;  // pixels of every PNG
const std::vector<std::string>& curves_file_names();     // the PNGs, in the order above

/// Redraws the PNGs of `run_dir` from its metrics.jsonl (each written atomically) and returns their
/// paths. Throws std::runtime_error when the folder has no metrics.jsonl.
std::vector<std::string> write_curves(const std::string& run_dir);

/// Redraws the curves after every epoch record (add it after the metrics.jsonl writer).
std::unique_ptr<MetricsWriter> make_curves_writer(const std::string& run_dir);

}  // namespace ranzcr
