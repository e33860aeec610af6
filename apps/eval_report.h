// What evaluate and predict write: the data they run on, the per-label table and JSON of evaluate, the
// submission CSV of predict.
#pragma once

#include <nlohmann/json.hpp>

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
/// averaged probabilities), the table on stdout, the JSON of --out.
void report_evaluation(const EvalArgs& args, const std::vector<std::string>& paths, const EvalData& data,
                       const EnsembleResult& r, RunLog& log);

/// The images predict runs on: --csv's ids in --images, else every image of --images.
DatasetIndex prediction_index(const EvalArgs& args, const Config& config);

/// The Kaggle submission: the id column, then one probability column per label.
std::string submission_csv(const Config& config, const DatasetIndex& index, const EnsembleResult& r);

}  // namespace ranzcr
