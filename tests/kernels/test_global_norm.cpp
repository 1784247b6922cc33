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
