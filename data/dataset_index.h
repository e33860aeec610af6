// The data set as a validated table: image ids, groups (PatientID), image paths and 0/1 labels.
#pragma once

#include <string>
#include <vector>

#include "data/data_config.h"

namespace ranzcr {

struct DatasetIndex {
  std::vector<std::string> ids;          // image ids (StudyInstanceUID)
  std::vector<std::string> groups;       // group per image ("" when no group column)
  std::vector<std::string> image_paths;  // image_dir/<id><ext>
  std::vector<std::string> label_names;  // label columns, in CSV order
  std::vector<float> labels;             // row-major [size, num_labels], values 0 or 1; empty if unlabeled
  size_t size() const { return ids.size(); }
  size_t num_labels() const { return label_names.size(); }
  /// The rows `rows` (in that order) as a new index.
  DatasetIndex subset(const std::vector<int64_t>& rows) const;
};

struct IndexOptions {
  std::string id_column = "StudyInstanceUID";
  std::string group_column = "PatientID";  // "" or absent from the CSV = no groups
  std::vector<std::string> label_columns;  // empty = every column but id and group
  bool with_labels = true;                 // false: read ids only (predict)
  std::string image_ext = ".jpg";
  bool check_images_exist = true;
};

/// Reads and validates `csv_path`; images are looked up in `image_dir`. One error lists the first few
/// offenders of a kind: missing columns, labels other than 0/1, duplicate or empty ids, missing images.
DatasetIndex load_index(const std::string& csv_path, const std::string& image_dir,
                        const IndexOptions& options);

/// Every file in `image_dir` ending in `image_ext`, sorted by name; ids are the names without extension.
DatasetIndex index_from_folder(const std::string& image_dir, const std::string& image_ext);

/// IndexOptions from the data config.
IndexOptions index_options(const DataConfig& data);

/// The training table of the data config: data.root/data.train_csv.
std::string train_csv_path(const DataConfig& data);

/// Loads the training table (data.root/data.train_csv, images in data.root/data.image_dir).
DatasetIndex load_train_index(const DataConfig& data, const IndexOptions& options);

}  // namespace ranzcr
