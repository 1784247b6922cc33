#include <gtest/gtest.h>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/global_norm.hpp"

using namespace exa::test;

TEST(GlobalNorm, MatchesHostSumOfSquares) {
  Kokkos::View<float**, Kokkos::LayoutRight, TestDevice> x("x", 17, 33);
  fill_uniform(x, 3);
  const double expect = dot(x, x);
  const double got = exa::kernels::global_sq_norm(x);
  EXPECT_NEAR(got, expect, 1e-9 * expect);
}

TEST(GlobalNorm, EmptyIsZero) {
  Kokkos::View<double*, Kokkos::LayoutRight, TestDevice> x("x", 0);
  EXPECT_EQ(exa::kernels::global_sq_norm(x), 0.0);
}

// The norm in pieces (memory.offload_experts) is the one-pass norm bit for
// bit, whatever the pieces (inside blocks, across them, adjacent, none),
// and calls back once per piece, in order.
TEST(GlobalNorm, PiecesGiveTheSameBits) {
  struct Span {
    std::int64_t begin, end;
  };
  Kokkos::View<float*, Kokkos::LayoutRight, TestDevice> x("x", 100003);
  fill_uniform(x, 11);
  const double whole = exa::kernels::global_sq_norm(x);
  const std::vector<std::vector<Span>> cases = {
      {}, {{0, 100003}}, {{5, 17}}, {{1000, 5000}, {5000, 5001}, {9000, 100003}}, {{3, 2048}, {70000, 70100}}};
  for (const auto& pieces : cases) {
    std::vector<std::size_t> called;
    const double got =
        exa::kernels::global_sq_norm_pieces(x, pieces, [&](std::size_t i) { called.push_back(i); });
    EXPECT_EQ(got, whole) << pieces.size() << " pieces";
    ASSERT_EQ(called.size(), pieces.size());
    for (std::size_t i = 0; i < called.size(); ++i) EXPECT_EQ(called[i], i);
  }
}
