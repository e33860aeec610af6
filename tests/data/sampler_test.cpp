#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace ranzcr {
namespace {

SamplerOptions opts(int rank, int world, uint64_t seed = 5) {
  SamplerOptions o;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

// Reference: torch.utils.data.DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=5)
// after set_epoch(e), printed by PyTorch 2.13.
TEST(Sampler, MatchesPyTorchDistributedSampler) {
  const std::vector<std::vector<int64_t>> epoch0 = {{1, 6, 0, 7}, {4, 3, 2, 1}, {9, 5, 8, 4}};
  const std::vector<std::vector<int64_t>> epoch1 = {{0, 1, 9, 6}, {7, 8, 2, 0}, {5, 3, 4, 7}};
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(10, opts(r, 3));
    EXPECT_EQ(s.indices(), epoch0[r]) << "rank " << r;
    s.set_epoch(1);
    EXPECT_EQ(s.indices(), epoch1[r]) << "rank " << r;
  }
  SamplerOptions drop = opts(1, 3);
  drop.drop_last = true;
  EXPECT_EQ(DistributedSampler(10, drop).indices(), (std::vector<int64_t>{4, 3, 2}));
}

TEST(Sampler, ShardsAreEqualAndCoverEverything) {
  for (int world : {1, 2, 3, 4}) {
    std::set<int64_t> all;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(101, opts(r, world));
      s.set_epoch(3);
      const auto idx = s.indices();
      EXPECT_EQ(static_cast<int64_t>(idx.size()), (101 + world - 1) / world);
      all.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(all.size(), 101u);
  }
}

TEST(Sampler, EvaluationShardsWithoutPadding) {
  std::vector<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    SamplerOptions o = opts(r, 4);
    o.shuffle = false;
    o.pad = false;
    DistributedSampler s(10, o);
    const auto idx = s.indices();
    EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
    all.insert(all.end(), idx.begin(), idx.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Sampler, RanksShareOnePermutationPerSeedAndEpoch) {
  for (int64_t epoch : {0, 4}) {
    // Interleaving the shards (rank r holds positions r, r + world, ...) gives back one padded permutation,
    // the same one whichever sampler object computes it.
    std::vector<std::vector<int64_t>> shards;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(20, opts(r, 3, 7));
      s.set_epoch(epoch);
      shards.push_back(s.indices());
      DistributedSampler again(20, opts(r, 3, 7));
      again.set_epoch(epoch);
      EXPECT_EQ(again.indices(), shards.back());
    }
    std::vector<int64_t> merged;
    for (size_t i = 0; i < shards[0].size(); ++i)
      for (int r = 0; r < 3; ++r) merged.push_back(shards[r][i]);
    SamplerOptions one = opts(0, 1, 7);
    DistributedSampler whole(20, one);
    whole.set_epoch(epoch);
    std::vector<int64_t> expected = whole.indices();
    expected.push_back(expected[0]);  // 20 -> 21: padded with the first index
    EXPECT_EQ(merged, expected);
  }
}

TEST(Sampler, OrderChangesWithEpoch) {
  DistributedSampler s(50, opts(0, 1));
  const auto a = s.indices();
  s.set_epoch(1);
  EXPECT_NE(a, s.indices());
  EXPECT_THROW(DistributedSampler(5, opts(2, 2)), std::invalid_argument);
}

}  // namespace
}  // namespace ranzcr
