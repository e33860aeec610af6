// Device annotations (Kaggle's train_annotations.csv: id, label, polyline `[[x, y], ...]` in the original
// image's pixels) and their masks, for the auxiliary segmentation loss.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_config.h"
#include "data/dataset_index.h"

namespace ranzcr {

using Polyline = std::vector<cv::Point2d>;  // points in the original image's pixels (x right, y down)

struct ImageAnnotations {
  std::vector<std::vector<Polyline>> by_row;  // per DatasetIndex row: its devices (empty = not annotated)
  int64_t rows = 0;                           // CSV rows used
  int64_t skipped_rows = 0;                   // bad rows skipped (skip_bad_annotations)
  int64_t annotated_images() const;
};

/// Parses `[[x, y], [x, y], ...]` (numbers, at least one point). Throws std::invalid_argument saying what
/// is wrong.
Polyline parse_polyline(const std::string& text);

/// Reads `csv_path` (columns `id_column`, `label`, `data`) for the rows of `index`. A row whose id is not
/// in the index or whose polyline is malformed is an error naming `csv_path:line`, or, with
/// `skip_bad_rows`, counted in skipped_rows and left out. A missing file or column is always an error.
ImageAnnotations load_annotations(const std::string& csv_path, const DatasetIndex& index,
                                  const std::string& id_column, bool skip_bad_rows);

/// Line thickness of a mask of side `size`, pixels: max(1, round(size / 64)).
int mask_line_thickness(int size);

/// The devices drawn as a CV_8UC1 0/255 mask of side `size` in the coordinates of the original image
/// (`original` pixels) resized to `size` x `size` (cv::resize's pixel-centre mapping), lines of
/// mask_line_thickness(size), 8-connected, not anti-aliased.
cv::Mat rasterize_mask(const std::vector<Polyline>& devices, cv::Size original, int size);

/// The annotations file of `data`: data.root/data.annotations_csv.
std::string annotations_csv_path(const DataConfig& data);

}  // namespace ranzcr
