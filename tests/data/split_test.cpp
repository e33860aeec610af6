#include "data/split.h"

#include <gtest/gtest.h>

#include <set>

namespace ranzcr {
namespace {

std::vector<std::string> make_groups(int n, int groups) {
  std::vector<std::string> g;
  for (int i = 0; i < n; ++i) g.push_back("p" + std::to_string((i * 7) % groups));
  return g;
}

void expect_no_leak(const std::vector<std::string>& groups, const Split& s) {
  std::set<std::string> train, val;
  for (auto i : s.train) train.insert(groups[i]);
  for (auto i : s.val) val.insert(groups[i]);
  for (const auto& g : val) EXPECT_EQ(train.count(g), 0u) << "group on both sides: " << g;
  EXPECT_EQ(s.train.size() + s.val.size(), groups.size());
}

TEST(Split, GroupSplitHasNoLeakageAndIsDeterministic) {
  const auto groups = make_groups(500, 50);
  const Split a = group_split(groups, 0.2, 1), b = group_split(groups, 0.2, 1),
              c = group_split(groups, 0.2, 2);
  expect_no_leak(groups, a);
  EXPECT_EQ(a.val, b.val);
  EXPECT_NE(a.val, c.val);
  std::set<std::string> val_groups;
  for (auto i : a.val) val_groups.insert(groups[i]);
  EXPECT_EQ(val_groups.size(), 10u);  // 20% of 50 patients
}

TEST(Split, EmptyGroupIsOneGroupPerRow) {
  std::vector<std::string> groups(10, "");
  const Split s = group_split(groups, 0.3, 0);
  EXPECT_EQ(s.val.size(), 3u);
}

TEST(Split, KFoldCoversEveryRowOnceWithoutLeakage) {
  const auto groups = make_groups(300, 37);
  std::vector<int> seen(groups.size(), 0);
  for (int f = 0; f < 5; ++f) {
    const Split s = group_kfold(groups, 5, f, 9);
    expect_no_leak(groups, s);
    for (auto i : s.val) ++seen[i];
    EXPECT_NEAR(static_cast<double>(s.val.size()), 60.0, 15.0);
  }
  for (int v : seen) EXPECT_EQ(v, 1);
  EXPECT_THROW(group_kfold(make_groups(10, 3), 5, 0, 0), std::runtime_error);
}

}  // namespace
}  // namespace ranzcr
