// What evaluate and predict write: the data they run on, the per-label table and JSON of evaluate, the
// submission CSV of predict.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "data/dataset_index.h"
#include "engine/config/config.h"
#include "engine/infer/ensemble.h"
#include "engine/report/run_log.h"

namespace ranzcr {

/// What evaluate runs on: rows of an index, and how to name them.
struct EvalData {
  DatasetIndex index;
  std::vector<int64_t> rows;
  std::string source;
};

/// --csv with --images, else the validation split of the config's data set.
EvalData evaluation_data(const EvalArgs& args, const Config& config);

/// "PATH", or "an ensemble of N models (A, B, ...)".
std::string models_text(const std::vector<std::string>& paths);

/// Rank 0's part of evaluate: AUC and loss (one model: of its logits, as validation; an ensemble: of the
/// averaged probabilities), the table on stdout, the JSON of --out and beside it roc.png, pr.png and
/// operating_points.csv (engine/report/roc_report.h; the AUC's bootstrap interval seeded by config.seed).
void report_evaluation(const EvalArgs& args, const Config& config, const std::vector<std::string>& paths,
                       const EvalData& data, const EnsembleResult& r, RunLog& log);

/// The images predict runs on: --csv's ids in --images, else every image of --images.
DatasetIndex prediction_index(const EvalArgs& args, const Config& config);

/// Thresholds of one operating point per label (predict --thresholds FILE --at POINT).
struct LabelThresholds {
  std::string point;                 // youden, sens90, ...
  std::vector<double> per_label;     // in the index's label order; NaN: the file has none for it
  std::vector<std::string> missing;  // labels without a threshold (one class where evaluate ran)
};

/// --thresholds' thresholds for `labels`; nullopt without --thresholds. Throws std::runtime_error naming
/// the file when it cannot be read, lacks the point, or has a label the model does not predict.
std::optional<LabelThresholds> prediction_thresholds(const EvalArgs& args,
                                                     const std::vector<std::string>& labels);

/// The Kaggle submission: the id column, then one probability column per label; with `thresholds` also a
/// 0/1 column per label, "LABEL:POINT" (1 when the probability is >= the threshold; empty for a label
/// without a threshold).
std::string submission_csv(const Config& config, const DatasetIndex& index, const EnsembleResult& r,
                           const std::optional<LabelThresholds>& thresholds = std::nullopt);

}  // namespace ranzcr
