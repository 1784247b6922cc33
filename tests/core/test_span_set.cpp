// SpanSet (core/span_set.hpp): the CUDA offload tier's count of what it
// has prefetched, which is its resident-bytes measurement, so every way a
// touch and a release can overlap is checked here, on any build.
#include <gtest/gtest.h>

#include <vector>

#include "core/span_set.hpp"

using exa::ElementSpan;
using exa::SpanSet;

namespace {

std::vector<std::pair<std::int64_t, std::int64_t>> pairs(const SpanSet& s) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& t : s.spans()) out.emplace_back(t.begin, t.end);
  return out;
}

using P = std::vector<std::pair<std::int64_t, std::int64_t>>;

}  // namespace

TEST(SpanSet, AddsMergeWhereTheyOverlapOrTouch) {
  SpanSet s;
  s.add({10, 20});
  s.add({30, 40});
  EXPECT_EQ(pairs(s), (P{{10, 20}, {30, 40}}));
  s.add({20, 25});  // touches the first
  EXPECT_EQ(pairs(s), (P{{10, 25}, {30, 40}}));
  s.add({12, 18});  // already covered
  EXPECT_EQ(pairs(s), (P{{10, 25}, {30, 40}}));
  s.add({0, 5});  // before everything, kept in order
  EXPECT_EQ(pairs(s), (P{{0, 5}, {10, 25}, {30, 40}}));
  s.add({24, 31});  // bridges two
  EXPECT_EQ(pairs(s), (P{{0, 5}, {10, 40}}));
  s.add({7, 7});  // empty: nothing
  EXPECT_EQ(s.elements(), 5 + 30);
}

TEST(SpanSet, RemovesCutSplitAndDropSpans) {
  SpanSet s;
  s.add({0, 100});
  s.remove({40, 60});  // splits
  EXPECT_EQ(pairs(s), (P{{0, 40}, {60, 100}}));
  s.remove({30, 70});  // trims both sides
  EXPECT_EQ(pairs(s), (P{{0, 30}, {70, 100}}));
  s.remove({200, 300});  // outside: nothing
  EXPECT_EQ(pairs(s), (P{{0, 30}, {70, 100}}));
  s.remove({0, 30});  // a whole span
  EXPECT_EQ(pairs(s), (P{{70, 100}}));
  s.remove({60, 110});  // covers the rest
  EXPECT_TRUE(s.spans().empty());
  EXPECT_EQ(s.elements(), 0);
  s.add({5, 9});
  s.clear();
  EXPECT_EQ(s.elements(), 0);
}

// The sequence test_offload_tier's CUDA test runs, by count only.
TEST(SpanSet, OverlappingTouchesCountTheirUnion) {
  SpanSet s;
  s.add({1000, 2000});
  s.add({1500, 4000});
  EXPECT_EQ(s.elements(), 3000);
  s.remove({2000, 3000});
  EXPECT_EQ(s.elements(), 2000);
  s.remove({1010, 1020});
  EXPECT_EQ(s.elements(), 1990);
}
