// Dynamic loss scaling's rule (optim/loss_scaler.hpp): halve and skip on
// an overflow, double after `window` clean steps in a row, never below 1,
// and the checkpoint state round trip.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "optim/loss_scaler.hpp"

using exa::optim::LossScaler;

TEST(LossScaler, StaticNeverMovesNorSkips) {
  LossScaler s(false, 128.0, 2);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.after_step(i % 2 == 0));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.overflow_skips(), 0);
}

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScaler s(true, 1024.0, 3);
  EXPECT_TRUE(s.after_step(false));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_FALSE(s.after_step(true));
  EXPECT_FALSE(s.after_step(true));
  EXPECT_EQ(s.scale(), 512.0) << "two clean steps of a window of three";
  EXPECT_TRUE(s.after_step(false)) << "an overflow restarts the count";
  EXPECT_EQ(s.scale(), 256.0);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.after_step(true));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.overflow_skips(), 2);
}

TEST(LossScaler, DeclinesAnOverflowAtScaleOne) {
  LossScaler s(true, 2.0, 1000);
  EXPECT_TRUE(s.after_step(false));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.after_step(false)) << "at S = 1 a non-finite gradient is resilience.nan_policy's";
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.overflow_skips(), 1);
}

TEST(LossScaler, StateRoundTripsAndMalformedStateIsRefused) {
  LossScaler a(true, 65536.0, 4);
  a.after_step(false);
  a.after_step(true);
  LossScaler b(true, 65536.0, 4);
  b.restore(a.state());
  EXPECT_EQ(b.scale(), 32768.0);
  EXPECT_EQ(b.clean_steps(), 1);
  EXPECT_EQ(b.overflow_skips(), 1);
  LossScaler c(true, 8.0, 4);
  c.restore({});
  EXPECT_EQ(c.scale(), 8.0) << "no state: the deck's start stands";
  EXPECT_THROW(c.restore({-1.0f, 0.0f, 0.0f}), exa::Error);
  EXPECT_THROW(c.restore({4.0f, 0.0f}), exa::Error);
  EXPECT_THROW(LossScaler(true, 0.0, 4), exa::Error);
}
