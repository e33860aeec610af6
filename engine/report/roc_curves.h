// ROC and precision-recall curves, operating points and bootstrap confidence intervals of one label's
// scores, with scikit-learn's conventions (roc_curve, precision_recall_curve): a sample is called positive
// when its score is >= the threshold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ranzcr {

/// The ROC curve at every distinct score, highest first, after a first point (0, 0) at threshold +inf:
/// sklearn.metrics.roc_curve(labels, scores, drop_intermediate=...). Empty when a class is missing.
struct RocCurve {
  std::vector<double> fpr, tpr, thresholds;
};
RocCurve roc_curve(const std::vector<double>& scores, const std::vector<float>& labels,
                   bool drop_intermediate = false);

/// Precision and recall at every distinct score, lowest threshold first, then (precision 1, recall 0)
/// without a threshold: sklearn.metrics.precision_recall_curve(labels, scores). Empty without positives.
struct PrCurve {
  std::vector<double> precision, recall, thresholds;
};
PrCurve precision_recall_curve(const std::vector<double>& scores, const std::vector<float>& labels);

/// Average precision, sklearn.metrics.average_precision_score: sum over thresholds of
/// (R_n - R_{n-1}) P_n. nullopt without positives.
std::optional<double> average_precision(const std::vector<double>& scores, const std::vector<float>& labels);

/// A threshold and what it gives on these scores. ppv / npv are NaN when nothing is called positive /
/// negative.
struct OperatingPoint {
  std::string name;  // youden, sens90, sens95, spec90, spec95
  double threshold = 0, sensitivity = 0, specificity = 0, ppv = 0, npv = 0;
};

/// Their names, in the order operating_points gives them.
inline const std::vector<std::string>& operating_point_names() {
  static const std::vector<std::string> names{"youden", "sens90", "sens95", "spec90", "spec95"};
  return names;
}

/// The operating points of the ROC curve's thresholds (drop_intermediate=false, +inf left out):
///   youden: the largest sensitivity + specificity - 1 (the highest threshold among ties);
///   sensNN: the highest threshold with sensitivity >= 0.NN (the best specificity there);
///   specNN: the lowest threshold with specificity >= 0.NN (the best sensitivity there).
/// Empty when a class is missing.
std::vector<OperatingPoint> operating_points(const std::vector<double>& scores,
                                             const std::vector<float>& labels);

/// The percentile bootstrap interval of the ROC AUC: `resamples` draws of n samples with replacement
/// (std::mt19937_64 seeded with `seed`); draws with a single class are redrawn. nullopt when a class
/// is missing or resamples is 0.
struct Interval {
  double low = 0, high = 0;
};
std::optional<Interval> bootstrap_auc_interval(const std::vector<double>& scores,
                                               const std::vector<float>& labels, int resamples, uint64_t seed,
                                               double level = 0.95);

}  // namespace ranzcr
