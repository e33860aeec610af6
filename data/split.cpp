#include "data/split.h"

#include "core/check.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <unordered_map>

namespace ranzcr {
namespace {

// Group id per row (dense, in order of first appearance) and the number of groups.
std::vector<int64_t> group_ids(const std::vector<std::string>& groups, int64_t* num_groups) {
  std::unordered_map<std::string, int64_t> id_of;
  std::vector<int64_t> ids(groups.size());
  int64_t next = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].empty()) {
      ids[i] = next++;
      continue;
    }
    auto it = id_of.emplace(groups[i], next);
    if (it.second) ++next;
    ids[i] = it.first->second;
  }
  *num_groups = next;
  return ids;
}

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  // Fisher-Yates with our own draw, so the order does not depend on the standard library's shuffle.
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  return order;
}

Split assign(const std::vector<int64_t>& gid, const std::vector<char>& is_val_group) {
  Split split;
  for (size_t i = 0; i < gid.size(); ++i) (is_val_group[gid[i]] ? split.val : split.train).push_back(i);
  return split;
}

}  // namespace

Split group_split(const std::vector<std::string>& groups, double val_fraction, uint64_t seed) {
  int64_t g = 0;
  const auto gid = group_ids(groups, &g);
  RANZCR_CHECK(g >= 2, "cannot split a data set with fewer than 2 groups (patients)");
  int64_t n_val = std::llround(val_fraction * static_cast<double>(g));
  n_val = std::clamp<int64_t>(n_val, 1, g - 1);
  const auto order = shuffled(g, seed);
  std::vector<char> is_val(g, 0);
  for (int64_t i = 0; i < n_val; ++i) is_val[order[i]] = 1;
  return assign(gid, is_val);
}

Split group_kfold(const std::vector<std::string>& groups, int folds, int fold, uint64_t seed) {
  int64_t g = 0;
  const auto gid = group_ids(groups, &g);
  RANZCR_CHECK(folds >= 2 && fold >= 0 && fold < folds, "group_kfold: need folds >= 2, 0 <= fold < folds");
  RANZCR_CHECK(g >= folds, "cannot make ", folds, " folds from ", g, " groups");
  std::vector<int64_t> size(g, 0);
  for (int64_t id : gid) ++size[id];
  auto order = shuffled(g, seed);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return size[a] > size[b]; });
  std::vector<int64_t> fold_rows(folds, 0);
  std::vector<char> is_val(g, 0);
  for (int64_t group : order) {
    const int f = static_cast<int>(std::min_element(fold_rows.begin(), fold_rows.end()) - fold_rows.begin());
    fold_rows[f] += size[group];
    is_val[group] = (f == fold);
  }
  return assign(gid, is_val);
}

Split validation_split(const DataConfig& d, const std::vector<std::string>& groups, uint64_t seed) {
  return d.folds > 0 ? group_kfold(groups, d.folds, d.fold, seed) : group_split(groups, d.val_fraction, seed);
}

}  // namespace ranzcr
