// Expert placement and the greedy balancing rule behind re-placement.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "parallel/expert/expert_placement.hpp"

namespace {

using exa::parallel::balanced_placement;
using exa::parallel::ExpertPlacement;

std::vector<int> identity(int n) {
  std::vector<int> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

double rank_imbalance(const ExpertPlacement& p, std::int64_t layer, const std::vector<std::int64_t>& load) {
  const auto r = p.rank_tokens(layer, load);
  const double mean = double(std::accumulate(r.begin(), r.end(), std::int64_t{0})) / double(r.size());
  return double(*std::max_element(r.begin(), r.end())) / mean;
}

TEST(ExpertPlacement, StartsAsContiguousRanges) {
  const ExpertPlacement p(8, 4);
  EXPECT_EQ(p.slots(), 2);
  EXPECT_TRUE(p.all_identity());
  EXPECT_EQ(p.expert_at(3), identity(8));
  EXPECT_EQ(p.rank_tokens(3, {1, 2, 3, 4, 5, 6, 7, 8}), (std::vector<std::int64_t>{3, 7, 11, 15}));
}

TEST(ExpertPlacement, SetKeepsInverseAndVersion) {
  ExpertPlacement p(4, 2);
  const auto v0 = p.version();
  p.set(1, {2, 0, 3, 1});
  EXPECT_GT(p.version(), v0);
  EXPECT_FALSE(p.is_identity(1));
  EXPECT_TRUE(p.is_identity(0));
  EXPECT_EQ(p.slot_of(1), (std::vector<int>{1, 3, 0, 2}));
  EXPECT_EQ(p.moved_layers(), (std::vector<std::int64_t>{1}));
  // Experts 2 and 0 on rank 0, 3 and 1 on rank 1.
  EXPECT_EQ(p.rank_tokens(1, {10, 1, 100, 1000}), (std::vector<std::int64_t>{110, 1001}));
  p.set(1, identity(4));
  EXPECT_TRUE(p.all_identity());
}

TEST(ExpertPlacement, RefusesWhatIsNotAPermutation) {
  ExpertPlacement p(4, 2);
  EXPECT_THROW(p.set(0, {0, 0, 1, 2}), exa::Error);
  EXPECT_THROW(p.set(0, {0, 1, 2}), exa::Error);
  EXPECT_THROW(p.set(0, {0, 1, 2, 4}), exa::Error);
  EXPECT_THROW(ExpertPlacement(6, 4), exa::Error);
}

TEST(BalancedPlacement, SplitsTwoHotExpertsOfOneRank) {
  // Experts 0 and 1 (both on rank 0) take nearly everything.
  const std::vector<std::int64_t> load{500, 480, 3, 2, 5, 1, 4, 5};
  ExpertPlacement p(8, 2);
  const double before = rank_imbalance(p, 0, load);
  const auto at = balanced_placement(load, p.expert_at(0), 2);
  p.set(0, at);
  const double after = rank_imbalance(p, 0, load);
  EXPECT_GT(before, 1.9);
  EXPECT_LT(after, 1.05);
  const auto slot = p.slot_of(0);
  EXPECT_NE(slot[0] / 4, slot[1] / 4);
}

TEST(BalancedPlacement, StayingExpertsKeepTheirSlots) {
  const std::vector<std::int64_t> load{90, 80, 10, 10, 10, 10, 5, 5};
  const auto current = identity(8);
  const auto at = balanced_placement(load, current, 2);
  std::vector<int> sorted = at;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity(8));  // a permutation
  for (int p = 0; p < 8; ++p) {
    const int e = at[std::size_t(p)];
    // An expert on the rank it was on sits in its old slot.
    if (p / 4 == e / 4) EXPECT_EQ(p, e) << "expert " << e;
  }
}

TEST(BalancedPlacement, EqualLoadsStayBalanced) {
  const std::vector<std::int64_t> load(8, 7);
  ExpertPlacement p(8, 4);
  p.set(0, balanced_placement(load, identity(8), 4));
  EXPECT_DOUBLE_EQ(rank_imbalance(p, 0, load), 1.0);
}

}  // namespace
