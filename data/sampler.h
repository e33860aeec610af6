// Sharded sampler with PyTorch's DistributedSampler algorithm.
#pragma once

#include <cstdint>
#include <vector>

namespace ranzcr {

struct SamplerOptions {
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;     // permutation from (seed + epoch), identical on every rank
  bool pad = true;         // pad by repeating from the front so every rank gets the same count
  bool drop_last = false;  // truncate instead of padding
  uint64_t seed = 0;
};

/// Yields positions in [0, size). With shuffle, the order is torch.randperm(size) seeded with seed + epoch,
/// exactly as torch.utils.data.DistributedSampler; rank r takes positions r, r + world, r + 2 world, ...
/// Without padding (evaluation), shards differ in length by at most one and cover every position once.
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, SamplerOptions options);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// This rank's positions for the current epoch.
  std::vector<int64_t> indices() const;
  /// Number of positions each rank gets (this rank's, when not padded).
  int64_t num_samples() const;

 private:
  int64_t size_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace ranzcr
