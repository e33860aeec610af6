// What evaluate and predict write: the data they run on, the per-label table and JSON of evaluate (with
// threshold_report.h's files beside it), the thresholds and submission CSV of predict. Plain values in, so
// that report/ stays below infer/: the caller passes what an ensemble's result (engine/infer/ensemble.h)
// holds.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset_index.h"
#include "engine/config/config.h"
#include "engine/io/trained_model.h"
#include "engine/report/run_log.h"

namespace ranzcr {

/// What evaluate runs on: rows of an index, and how to name them.
struct EvalData {
  DatasetIndex index;
  std::vector<int64_t> rows;
  std::string source;
};

/// The rows of `csv` (its images in the folder `images`) when `csv` is not empty, else the validation
/// split of the config's data set.
EvalData evaluation_data(const Config& config, const std::string& csv, const std::string& images);

/// "PATH", or "an ensemble of N models (A, B, ...)".
std::string models_text(const std::vector<std::string>& paths);

/// One model of an evaluated ensemble: its trained metadata and the input size it ran at.
struct EvaluatedModel {
  TrainedModelInfo info;
  int image_size = 0;
};

/// What evaluate's report reads of an ensemble's predictions (EnsembleResult's fields).
struct EvalPredictions {
  torch::Tensor probs;   // [N, C] float64: the mean of the models' probabilities
  torch::Tensor logits;  // [N, C] the model's logits when there is one model; undefined otherwise
  torch::Tensor labels;  // [N, C] float32 0/1
  torch::Tensor rows;    // [N] int64: the index row of each prediction
  int64_t skipped = 0;   // unreadable images skipped
  std::vector<EvaluatedModel> models;  // in the order of the paths
  bool tta_hflip = false;              // the first model's --tta
};

/// Where evaluate's report goes and how its intervals are drawn.
struct EvalReportOptions {
  std::string out;    // the JSON file; "" = the table only
  int bootstrap = 0;  // resamples of the AUC's 95% interval (0 = none)
  uint64_t seed = 0;  // seeds the bootstrap (config.seed)
};

/// Rank 0's part of evaluate: AUC and loss (one model: of its logits, as validation; an ensemble: of the
/// averaged probabilities), the table on stdout, the JSON of `options.out` and beside it roc.png, pr.png
/// and operating_points.csv (threshold_report.h).
/// What it wrote: the JSON (also without options.out), and the files (options.out first; none without it).
struct EvalReport {
  std::string json;
  std::vector<std::string> files;
};
EvalReport report_evaluation(const std::vector<std::string>& paths, const EvalData& data,
                             const EvalPredictions& p, const EvalReportOptions& options, RunLog& log);

/// The images predict runs on: `csv`'s ids in the folder `images` when `csv` is not empty, else every
/// image of `images`.
DatasetIndex prediction_index(const Config& config, const std::string& csv, const std::string& images);

/// Thresholds of one operating point per label (predict --thresholds FILE --at POINT).
struct LabelThresholds {
  std::string point;                 // youden, sens90, ...
  std::vector<double> per_label;     // in the index's label order; NaN: the file has none for it
  std::vector<std::string> missing;  // labels without a threshold (one class where evaluate ran)
};

/// The thresholds of operating point `point` in the operating_points.csv `file` for `labels`; nullopt when
/// `file` is empty. Throws std::runtime_error naming the file when it cannot be read, lacks the point, or
/// has a label the model does not predict.
std::optional<LabelThresholds> prediction_thresholds(const std::string& file, const std::string& point,
                                                     const std::vector<std::string>& labels);

/// The Kaggle submission: the id column, then one probability column per label; with `thresholds` also a
/// 0/1 column per label, "LABEL:POINT" (1 when the probability is >= the threshold; empty for a label
/// without a threshold). `probs` [N, C] float64, `rows` [N] int64: the index row of each prediction.
std::string submission_csv(const std::string& id_column, const DatasetIndex& index,
                           const torch::Tensor& probs, const torch::Tensor& rows,
                           const std::optional<LabelThresholds>& thresholds = std::nullopt);

}  // namespace ranzcr
