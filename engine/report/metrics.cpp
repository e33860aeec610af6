#include "engine/report/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ranzcr {

std::optional<double> roc_auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  const size_t n = scores.size();
  // NaN has no rank (and breaks the strict weak order std::sort needs): the AUC is undefined. +-Inf
  // order like any other value.
  if (std::any_of(scores.begin(), scores.end(), [](double s) { return std::isnan(s); })) return std::nullopt;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rank_sum_pos = 0.0, n_pos = 0.0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j share their mean
    for (size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) rank_sum_pos += avg_rank, n_pos += 1.0;
    i = j;
  }
  const double n_neg = static_cast<double>(n) - n_pos;
  if (n_pos == 0.0 || n_neg == 0.0) return std::nullopt;
  return (rank_sum_pos - n_pos * (n_pos + 1.0) / 2.0) / (n_pos * n_neg);
}

AucReport multilabel_auc(const torch::Tensor& scores, const torch::Tensor& labels,
                         const std::vector<std::string>& names) {
  const auto s = scores.to(torch::kCPU, torch::kDouble).contiguous();
  const auto l = labels.to(torch::kCPU, torch::kFloat).contiguous();
  const int64_t n = s.size(0), c = s.size(1);
  const auto sa = s.accessor<double, 2>();
  const auto la = l.accessor<float, 2>();
  AucReport report;
  double sum = 0.0;
  int defined = 0;
  for (int64_t j = 0; j < c; ++j) {
    std::vector<double> col(n);
    std::vector<float> lab(n);
    for (int64_t i = 0; i < n; ++i) col[i] = sa[i][j], lab[i] = la[i][j];
    auto auc = roc_auc(col, lab);
    report.per_class.push_back(auc);
    if (auc)
      sum += *auc, ++defined;
    else
      report.undefined.push_back(j < static_cast<int64_t>(names.size()) ? names[j] : std::to_string(j));
  }
  if (defined > 0) report.mean = sum / defined;
  return report;
}

}  // namespace ranzcr
