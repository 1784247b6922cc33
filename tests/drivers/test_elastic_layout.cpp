// exa::elastic::shrink: the world size examoe-elastic relaunches a failed job
// on keeps tp/cp/pp and the global batch, shrinks dp and ep to fit, and is
// the largest one the deck's checks (here a stand-in) accept.
#include <gtest/gtest.h>

#include <set>

#include "elastic_layout.hpp"

using exa::elastic::Layout;
using exa::elastic::shrink;

namespace {
Layout dp_only(int ranks, long micro_batch, long grad_accum) {
  Layout l;
  l.ranks = l.dp = ranks;
  l.micro_batch = micro_batch;
  l.grad_accum = grad_accum;
  return l;
}
const auto any = [](const Layout&) { return true; };
}  // namespace

TEST(ElasticShrink, GrowsGradAccumSoTheGlobalBatchStays) {
  const auto l = shrink(dp_only(4, 2, 3), 3, 1, any);  // 12 micro-batches a step
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ranks, 3);
  EXPECT_EQ(l->dp, 3);
  EXPECT_EQ(l->grad_accum, 4);
  EXPECT_EQ(l->global_batch(), 24);
}

TEST(ElasticShrink, PassesOverSizesWhereTheBatchDoesNotDivide) {
  const auto l = shrink(dp_only(4, 8, 1), 3, 1, any);  // 4 micro-batches: not on 3 ranks
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ranks, 2);
  EXPECT_EQ(l->grad_accum, 2);
  EXPECT_FALSE(shrink(dp_only(4, 8, 1), 3, 3, any).has_value());  // --min-ranks 3
}

TEST(ElasticShrink, KeepsModelDimensionsAndFitsEp) {
  Layout base = dp_only(8, 1, 1);
  base.tp = 2;
  base.dp = 4;
  base.ep = 4;
  const auto l = shrink(base, 7, 1, any);  // 7 and 5 are not multiples of tp; 6 -> dp 3 does not divide 4
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ranks, 4);
  EXPECT_EQ(l->tp, 2);
  EXPECT_EQ(l->dp, 2);
  EXPECT_EQ(l->grad_accum, 2);
  EXPECT_EQ(l->ep, 2);  // the largest divisor of 4 that divides dp * cp = 2
}

TEST(ElasticShrink, TakesTheLargestSizeTheChecksAccept) {
  std::set<int> asked;
  const auto l = shrink(dp_only(4, 1, 3), 3, 1, [&](const Layout& c) {
    asked.insert(c.ranks);
    return c.ranks <= 2;  // the deck refuses 3 ranks
  });
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ranks, 2);
  EXPECT_EQ(l->grad_accum, 6);
  EXPECT_EQ(asked, (std::set<int>{2, 3}));
  EXPECT_FALSE(shrink(dp_only(4, 1, 3), 3, 1, [](const Layout&) { return false; }).has_value());
}
