// Train/validation splits grouped by PatientID: no group ever appears on both sides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_config.h"

namespace ranzcr {

struct Split {
  std::vector<int64_t> train;  // row indices, ascending
  std::vector<int64_t> val;    // row indices, ascending
};

/// Shuffles the distinct groups with `seed` and puts round(val_fraction * groups) of them (at least one,
/// at most all but one) in validation. Empty group names count as one group per row.
Split group_split(const std::vector<std::string>& groups, double val_fraction, uint64_t seed);

/// GroupKFold: groups are shuffled with `seed`, then assigned largest first to the fold holding the fewest
/// rows; fold `fold` is validation.
Split group_kfold(const std::vector<std::string>& groups, int folds, int fold, uint64_t seed);

/// The train/validation split `data` asks for: GroupKFold fold data.fold when data.folds > 0, else a
/// data.val_fraction holdout; grouped by `groups` (one per row), shuffled with `seed`.
Split validation_split(const DataConfig& data, const std::vector<std::string>& groups, uint64_t seed);

}  // namespace ranzcr
