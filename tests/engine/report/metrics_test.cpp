#include "engine/report/metrics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace ranzcr {
namespace {

TEST(Metrics, AucByHand) {
  // Pairs (pos, neg): (0.35,0.1) win, (0.35,0.4) loss, (0.8,0.1) win, (0.8,0.4) win -> 3/4.
  EXPECT_DOUBLE_EQ(*roc_auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(*roc_auc({0.1, 0.2, 0.3}, {0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(*roc_auc({0.3, 0.2, 0.1}, {0, 1, 1}), 0.0);
}

TEST(Metrics, TiesCountHalf) {
  // pos {0.5, 0.9}, neg {0.5, 0.5}: (0.5 vs 0.5) x2 = 0.5 each, (0.9 vs 0.5) x2 = 1 each -> 3/4.
  EXPECT_DOUBLE_EQ(*roc_auc({0.5, 0.5, 0.5, 0.9}, {0, 1, 0, 1}), 0.75);
  // All scores equal: 0.5.
  EXPECT_DOUBLE_EQ(*roc_auc({1, 1, 1, 1, 1}, {0, 1, 0, 1, 1}), 0.5);
  // pos {2, 1, 1}, neg {1, 0}: pairs (2,1)=1 (2,0)=1 (1,1)=.5 (1,0)=1 (1,1)=.5 (1,0)=1 -> 5/6.
  EXPECT_NEAR(*roc_auc({2, 1, 1, 1, 0}, {1, 1, 1, 0, 0}), 5.0 / 6.0, 1e-12);
}

TEST(Metrics, SingleClassColumnIsUndefinedAndLeftOutOfTheMean) {
  EXPECT_FALSE(roc_auc({0.1, 0.2}, {1, 1}).has_value());
  const auto scores = torch::tensor({{0.1, 0.9, 0.3}, {0.4, 0.2, 0.1}, {0.35, 0.5, 0.2}, {0.8, 0.1, 0.7}});
  const auto labels = torch::tensor({{0.f, 1.f, 0.f}, {0.f, 1.f, 0.f}, {1.f, 1.f, 1.f}, {1.f, 1.f, 0.f}});
  const AucReport r = multilabel_auc(scores, labels, {"a", "b", "c"});
  ASSERT_TRUE(r.per_class[0].has_value());
  EXPECT_DOUBLE_EQ(*r.per_class[0], 0.75);
  EXPECT_FALSE(r.per_class[1].has_value());
  EXPECT_DOUBLE_EQ(*r.per_class[2], 1.0 / 3.0);  // pos 0.2 beats only 0.1 of neg {0.3, 0.1, 0.7}
  EXPECT_DOUBLE_EQ(r.mean, (0.75 + 1.0 / 3.0) / 2.0);
  EXPECT_EQ(r.undefined, (std::vector<std::string>{"b"}));
}

// A diverged model's NaN scores once made the tie loop spin forever (NaN == NaN is false).
TEST(Metrics, NanScoresAreUndefinedAndInfinitiesRank) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(roc_auc({0.1, nan, 0.3, 0.2}, {0, 1, 1, 0}).has_value());
  EXPECT_FALSE(roc_auc({nan, nan, nan}, {0, 1, 1}).has_value());
  EXPECT_DOUBLE_EQ(*roc_auc({-inf, inf, 0.3, 0.2}, {0, 1, 1, 0}), 1.0);
  // pos {inf, inf}, neg {inf, -inf}: (inf, inf) = .5 twice, (inf, -inf) = 1 twice -> 3/4.
  EXPECT_DOUBLE_EQ(*roc_auc({inf, inf, inf, -inf}, {0, 1, 1, 0}), 0.75);
  const auto scores = torch::full({4, 2}, nan, torch::kDouble);
  const auto labels = torch::tensor({{0.f, 1.f}, {1.f, 0.f}, {0.f, 1.f}, {1.f, 0.f}});
  const AucReport r = multilabel_auc(scores, labels, {"a", "b"});
  EXPECT_TRUE(std::isnan(r.mean));
  EXPECT_EQ(r.undefined, (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace ranzcr
