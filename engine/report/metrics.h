// ROC AUC as the Mann-Whitney U statistic, per column of a multi-label problem.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ranzcr {

/// AUC of `scores` against 0/1 `labels`: P(score_pos > score_neg) + 0.5 P(score_pos == score_neg), from
/// average ranks. nullopt when only one class is present or a score is NaN (undefined).
std::optional<double> roc_auc(const std::vector<double>& scores, const std::vector<float>& labels);

struct AucReport {
  std::vector<std::optional<double>> per_class;            // nullopt = undefined (one class, NaN scores)
  double mean = std::numeric_limits<double>::quiet_NaN();  // mean over defined columns (NaN if none)
  std::vector<std::string> undefined;                      // names of the undefined columns
};

/// Per-column AUC of `scores` [N, C] (any monotone score: logits or probabilities) against `labels` [N, C].
AucReport multilabel_auc(const torch::Tensor& scores, const torch::Tensor& labels,
                         const std::vector<std::string>& names);

}  // namespace ranzcr
