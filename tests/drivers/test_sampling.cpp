// exa::inference::sample_token: greedy, temperature and top-k sampling of one
// token from logits with a given uniform draw (what examoe-generate does per
// step).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "inference/generate.hpp"

using exa::inference::sample_token;

TEST(SampleToken, GreedyTakesTheLargestLogitLowestIdOnTies) {
  EXPECT_EQ(sample_token({0.f, 3.f, 1.f, 3.f}, 0.0, 0, 0.5), 1);
  EXPECT_EQ(sample_token({-1.f, -2.f}, 0.0, 40, 1.0), 0);
  // The draw and top-k do not matter at temperature 0.
  EXPECT_EQ(sample_token({0.f, 3.f, 1.f}, 0.0, 1, 0.01), 1);
}

TEST(SampleToken, TopOneIsGreedy) {
  const std::vector<float> l{0.5f, 0.1f, 2.0f, 1.9f};
  for (double u : {1e-9, 0.3, 0.7, 1.0}) EXPECT_EQ(sample_token(l, 1.0, 1, u), 2);
}

TEST(SampleToken, DrawsFollowTheSoftmaxOverTheTopK) {
  // Logits log(1), log(2), log(3), log(4) at temperature 1: probabilities
  // 0.1, 0.2, 0.3, 0.4; ordered by logit the cumulative sums are 0.4 (id 3),
  // 0.7 (id 2), 0.9 (id 1), 1.0 (id 0).
  const std::vector<float> l{std::log(1.f), std::log(2.f), std::log(3.f), std::log(4.f)};
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.39), 3);
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.41), 2);
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.69), 2);
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.71), 1);
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.95), 0);
  EXPECT_EQ(sample_token(l, 1.0, 0, 1.0), 0);
  // top_k = 2 renormalises over ids 3 and 2: 4/7 and 3/7.
  EXPECT_EQ(sample_token(l, 1.0, 2, 0.57), 3);
  EXPECT_EQ(sample_token(l, 1.0, 2, 0.58), 2);
  EXPECT_EQ(sample_token(l, 1.0, 2, 1.0), 2);
  // A top_k above V means all of them.
  EXPECT_EQ(sample_token(l, 1.0, 1000, 0.95), 0);
}

TEST(SampleToken, LowTemperatureSharpens) {
  const std::vector<float> l{1.0f, 1.1f};
  // At t = 1 id 0 keeps ~47.5%; at t = 0.01 it keeps ~4.5e-5.
  EXPECT_EQ(sample_token(l, 1.0, 0, 0.9), 0);
  EXPECT_EQ(sample_token(l, 0.01, 0, 0.9), 1);
}

TEST(SampleToken, NonFiniteLogitsAreAnError) {
  const float nan = std::nanf("");
  EXPECT_THROW(sample_token({nan, nan}, 1.0, 0, 0.5), exa::Error);
  // A NaN among finite logits is never drawn.
  EXPECT_EQ(sample_token({nan, 0.f, 1.f}, 1.0, 0, 1.0), 1);
}
