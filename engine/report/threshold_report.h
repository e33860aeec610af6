// What `evaluate` writes beside its JSON for the people who choose a threshold: per label the ROC AUC with
// a bootstrap confidence interval, average precision and operating points (operating_points.csv), and
// the curves as panels (roc.png, pr.png). `predict --thresholds` reads operating_points.csv back.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/report/roc_curves.h"

namespace ranzcr {

/// One label's probabilities and 0/1 truth over the evaluated images.
struct LabelScores {
  std::string name;
  std::vector<double> scores;
  std::vector<float> labels;
};

struct LabelRocSummary {
  std::string name;
  int64_t positives = 0, negatives = 0;
  std::optional<double> auc, average_precision;  // nullopt: one class only
  std::optional<Interval> auc_ci;                // nullopt also when bootstrap is 0
  std::vector<OperatingPoint> points;            // youden, sens90, sens95, spec90, spec95
};

/// The summaries, with `bootstrap` resamples for the 95% AUC interval (seeded by seed + label index).
std::vector<LabelRocSummary> summarize_roc(const std::vector<LabelScores>& labels, int bootstrap,
                                           uint64_t seed);

/// operating_points.csv: label,point,threshold,sensitivity,specificity,ppv,npv,auc,auc_ci_low,
/// auc_ci_high,average_precision,positives,negatives; five rows per label with both classes.
std::string operating_points_csv(const std::vector<LabelRocSummary>& summaries);

/// roc.png and pr.png: a panel per label (curve, AUC with its interval or AP with the prevalence, the
/// Youden point marked with its threshold). Written atomically.
void write_roc_png(const std::string& path, const std::vector<LabelScores>& labels,
                   const std::vector<LabelRocSummary>& summaries);
void write_pr_png(const std::string& path, const std::vector<LabelScores>& labels,
                  const std::vector<LabelRocSummary>& summaries);

/// The thresholds of operating point `point` (e.g. youden, sens90) in an operating_points.csv, by label.
/// Throws std::runtime_error naming the file (and line) when it cannot be read, is not such a file, or
/// has no row for `point`.
std::map<std::string, double> read_thresholds(const std::string& path, const std::string& point);

}  // namespace ranzcr
