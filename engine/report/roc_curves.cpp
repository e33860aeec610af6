#include "engine/report/roc_curves.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "engine/report/metrics.h"

namespace ranzcr {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Cumulative false and true positives at each distinct score, highest first (sklearn's
// _binary_clf_curve / confusion_matrix_at_thresholds).
struct Counts {
  std::vector<double> fps, tps, thresholds;
};

Counts counts_at_thresholds(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  Counts c;
  double tp = 0, fp = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    (labels[order[i]] > 0.5f ? tp : fp) += 1;
    if (i + 1 < order.size() && scores[order[i + 1]] == scores[order[i]]) continue;
    c.fps.push_back(fp), c.tps.push_back(tp), c.thresholds.push_back(scores[order[i]]);
  }
  return c;
}

bool has_both_classes(const std::vector<float>& labels) {
  const auto pos = std::count_if(labels.begin(), labels.end(), [](float v) { return v > 0.5f; });
  return pos > 0 && pos < static_cast<std::ptrdiff_t>(labels.size());
}

OperatingPoint point_at(const std::string& name, double threshold, double tp, double fp, double pos,
                        double neg) {
  const double fn = pos - tp, tn = neg - fp;
  return {name,
          threshold,
          tp / pos,
          tn / neg,
          tp + fp > 0 ? tp / (tp + fp) : kNaN,
          tn + fn > 0 ? tn / (tn + fn) : kNaN};
}

}  // namespace

RocCurve roc_curve(const std::vector<double>& scores, const std::vector<float>& labels,
                   bool drop_intermediate) {
  if (!has_both_classes(labels)) return {};
  Counts c = counts_at_thresholds(scores, labels);
  std::vector<size_t> keep;
  for (size_t i = 0; i < c.fps.size(); ++i) {
    const bool corner = i == 0 || i + 1 == c.fps.size() || c.fps[i + 1] - 2 * c.fps[i] + c.fps[i - 1] != 0 ||
                        c.tps[i + 1] - 2 * c.tps[i] + c.tps[i - 1] != 0;
    if (!drop_intermediate || c.fps.size() <= 2 || corner) keep.push_back(i);
  }
  RocCurve r{{0.0}, {0.0}, {std::numeric_limits<double>::infinity()}};
  const double neg = c.fps.back(), pos = c.tps.back();
  for (size_t i : keep) {
    r.fpr.push_back(c.fps[i] / neg), r.tpr.push_back(c.tps[i] / pos), r.thresholds.push_back(c.thresholds[i]);
  }
  return r;
}

PrCurve precision_recall_curve(const std::vector<double>& scores, const std::vector<float>& labels) {
  const Counts c = counts_at_thresholds(scores, labels);
  if (c.tps.empty() || c.tps.back() == 0) return {};
  PrCurve p;
  for (size_t k = c.tps.size(); k-- > 0;) {
    const double predicted = c.tps[k] + c.fps[k];
    p.precision.push_back(predicted != 0 ? c.tps[k] / predicted : 0.0);
    p.recall.push_back(c.tps[k] / c.tps.back());
    p.thresholds.push_back(c.thresholds[k]);
  }
  p.precision.push_back(1.0), p.recall.push_back(0.0);
  return p;
}

std::optional<double> average_precision(const std::vector<double>& scores, const std::vector<float>& labels) {
  const PrCurve p = precision_recall_curve(scores, labels);
  if (p.recall.empty()) return std::nullopt;
  double ap = 0;  // recall decreases along the arrays: -sum(diff(recall) * precision[:-1])
  for (size_t i = 0; i + 1 < p.recall.size(); ++i) ap += (p.recall[i] - p.recall[i + 1]) * p.precision[i];
  return ap;
}

std::vector<OperatingPoint> operating_points(const std::vector<double>& scores,
                                             const std::vector<float>& labels) {
  if (!has_both_classes(labels)) return {};
  const Counts c = counts_at_thresholds(scores, labels);
  const double pos = c.tps.back(), neg = c.fps.back();
  auto at = [&](const std::string& name, size_t i) {
    return point_at(name, c.thresholds[i], c.tps[i], c.fps[i], pos, neg);
  };
  std::vector<OperatingPoint> out;
  // J = tp/pos - fp/neg, compared as tp*neg - fp*pos: exact in doubles for counts below 2^26, so ties
  // are ties. Thresholds fall along i: the first maximum is the highest threshold among them.
  size_t best = 0;
  for (size_t i = 1; i < c.tps.size(); ++i)
    if (c.tps[i] * neg - c.fps[i] * pos > c.tps[best] * neg - c.fps[best] * pos) best = i;
  out.push_back(at("youden", best));
  for (int target : {90, 95}) {
    size_t i = 0;
    while (c.tps[i] / pos < target / 100.0) ++i;  // the last point has sensitivity 1
    out.push_back(at("sens" + std::to_string(target), i));
  }
  for (int target : {90, 95}) {
    // Specificity falls along i. When even the highest score has too many negatives, only calling nothing
    // positive (threshold +inf) reaches the target.
    const std::string name = "spec" + std::to_string(target);
    if (1.0 - c.fps[0] / neg < target / 100.0) {
      out.push_back(point_at(name, std::numeric_limits<double>::infinity(), 0, 0, pos, neg));
      continue;
    }
    size_t i = 0;
    while (i + 1 < c.fps.size() && 1.0 - c.fps[i + 1] / neg >= target / 100.0) ++i;
    out.push_back(at(name, i));
  }
  return out;
}

std::optional<Interval> bootstrap_auc_interval(const std::vector<double>& scores,
                                               const std::vector<float>& labels, int resamples, uint64_t seed,
                                               double level) {
  if (resamples <= 0 || !has_both_classes(labels)) return std::nullopt;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, scores.size() - 1);
  std::vector<double> aucs, s(scores.size());
  std::vector<float> l(labels.size());
  while (static_cast<int>(aucs.size()) < resamples) {
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t j = pick(rng);
      s[i] = scores[j], l[i] = labels[j];
    }
    if (const auto auc = roc_auc(s, l)) aucs.push_back(*auc);
  }
  std::sort(aucs.begin(), aucs.end());
  auto quantile = [&](double q) {  // linear interpolation, numpy's default
    const double pos = q * static_cast<double>(aucs.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, aucs.size() - 1);
    return aucs[lo] + (pos - static_cast<double>(lo)) * (aucs[hi] - aucs[lo]);
  };
  return Interval{quantile((1 - level) / 2), quantile((1 + level) / 2)};
}

}  // namespace ranzcr
