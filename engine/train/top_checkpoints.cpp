#include "engine/train/top_checkpoints.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"

namespace fs = std::filesystem;

namespace ranzcr {

std::string TopCheckpoints::path(int64_t epoch) const {
  return run_folder::top_epoch_checkpoint(dir_, epoch);
}

void TopCheckpoints::scan(int64_t epoch) {
  kept_.clear();
  if (!fs::is_directory(dir_)) return;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (!run_folder::is_top_epoch_checkpoint(entry.path())) continue;
    const CheckpointMeta meta = read_checkpoint_meta(entry.path().string());
    if (meta.epoch > epoch || k_ == 0)
      fs::remove(entry.path());
    else
      kept_.emplace_back(meta.epoch_metric, meta.epoch);
  }
  sort();
  prune();
}

std::string TopCheckpoints::admit(int64_t epoch, double metric) {
  if (k_ <= 0 || std::isnan(metric)) return "";
  if (static_cast<int>(kept_.size()) >= k_ && metric <= kept_.back().first) return "";
  kept_.emplace_back(metric, epoch);
  sort();
  return path(epoch);
}

void TopCheckpoints::prune() {
  while (static_cast<int>(kept_.size()) > std::max(k_, 0)) {
    fs::remove(path(kept_.back().second));
    kept_.pop_back();
  }
}

std::vector<int64_t> TopCheckpoints::epochs() const {
  std::vector<int64_t> out;
  for (const auto& kv : kept_) out.push_back(kv.second);
  return out;
}

// Best metric first; among equals the earlier epoch.
void TopCheckpoints::sort() {
  std::sort(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
}

}  // namespace ranzcr
