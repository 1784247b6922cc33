#include <gtest/gtest.h>

#include <cmath>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "optim/lr_schedule.hpp"

using exa::optim::Decay;
using exa::optim::LrSchedule;

namespace {
constexpr double kPi = 3.14159265358979323846;
}

TEST(LrSchedule, WarmupRampsLinearlyFromZeroToThePeakAtTheLastWarmupStep) {
  const LrSchedule s(1e-3, 1e-4, 10, 110, Decay::Cosine);
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);      // lr * 1/10: the first update is not spent at 0
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);      // lr * 5/10
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);      // last warmup step: the peak
  EXPECT_LT(s.at(10), 1e-3);            // decay starts on the next step
  for (std::int64_t i = 1; i < 10; ++i) EXPECT_GT(s.at(i), s.at(i - 1));
}

TEST(LrSchedule, CosineDecaysToTheFloorAtTheLastStep) {
  const double lr = 1e-3, lo = 1e-4;
  const LrSchedule s(lr, lo, 10, 110, Decay::Cosine);  // decay over t = 11..110, T - W = 100
  EXPECT_DOUBLE_EQ(s.at(34), lo + (lr - lo) * 0.5 * (1 + std::cos(kPi * 0.25)));  // t = 35, p = 1/4
  EXPECT_DOUBLE_EQ(s.at(59), lo + (lr - lo) * 0.5);                               // t = 60, p = 1/2: midpoint
  EXPECT_DOUBLE_EQ(s.at(109), lo);  // the last step, s = T - 1
  EXPECT_DOUBLE_EQ(s.at(110), lo);  // beyond train.steps: stays at the floor
  EXPECT_DOUBLE_EQ(s.at(100000), lo);
  for (std::int64_t i = 10; i < 110; ++i) EXPECT_LE(s.at(i), s.at(i - 1)) << i;
}

TEST(LrSchedule, LinearDecaysToTheFloorAtTheLastStep) {
  const double lr = 2e-3, lo = 2e-4;
  const LrSchedule s(lr, lo, 10, 110, Decay::Linear);
  EXPECT_DOUBLE_EQ(s.at(9), lr);
  EXPECT_DOUBLE_EQ(s.at(34), lr - (lr - lo) * 0.25);
  EXPECT_DOUBLE_EQ(s.at(59), lr - (lr - lo) * 0.5);
  EXPECT_DOUBLE_EQ(s.at(109), lo);
  EXPECT_DOUBLE_EQ(s.at(500), lo);
}

TEST(LrSchedule, ConstantHoldsThePeakAfterWarmupAndIgnoresTheFloor) {
  const LrSchedule s(3e-4, 1e-5, 4, 20, Decay::Constant);
  EXPECT_DOUBLE_EQ(s.at(0), 3e-4 / 4);
  EXPECT_DOUBLE_EQ(s.at(3), 3e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 3e-4);
  EXPECT_DOUBLE_EQ(s.at(19), 3e-4);
  EXPECT_DOUBLE_EQ(s.at(1000), 3e-4);
}

TEST(LrSchedule, WithoutWarmupTheFirstStepIsAlreadyOnTheDecayCurve) {
  const LrSchedule s(1.0, 0.0, 0, 4, Decay::Linear);  // t = 1..4, p = t/4
  EXPECT_DOUBLE_EQ(s.at(0), 0.75);
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 0.0);
  EXPECT_DOUBLE_EQ(LrSchedule(1.0, 0.0, 0, 4, Decay::Constant).at(0), 1.0);
}

TEST(LrSchedule, WarmupLongerThanTheRunIsAllWarmup) {
  const LrSchedule s(1.0, 0.5, 10, 5, Decay::Cosine);
  EXPECT_DOUBLE_EQ(s.at(4), 0.5);  // 5/10 of the peak at the last step
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 0.5);  // past both: the floor
}

TEST(LrSchedule, FromTheDeck) {
  const auto cfg = exa::deck::Config::from_text(
      "[train]\nsteps = 200\n[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup_steps = 20\nschedule = \"linear\"\n",
      "mem.toml", {}, 1);
  const auto s = LrSchedule::from_deck(cfg);
  EXPECT_EQ(s.decay(), Decay::Linear);
  EXPECT_EQ(s.warmup_steps(), 20);
  EXPECT_EQ(s.total_steps(), 200);
  EXPECT_DOUBLE_EQ(s.at(19), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(199), 1e-4);
  EXPECT_EQ(s.describe(), "linear lr=0.001 min_lr=0.0001 warmup_steps=20 total_steps=200");
  // The deck's defaults: cosine, warmup 100, 1000 steps, min_lr 0.
  const auto d = LrSchedule::from_deck(exa::deck::Config::from_text("", "mem.toml", {}, 1));
  EXPECT_EQ(d.decay(), Decay::Cosine);
  EXPECT_DOUBLE_EQ(d.at(999), 0.0);
}

TEST(LrSchedule, RejectsInvalidSettings) {
  EXPECT_THROW(LrSchedule(1e-3, 2e-3, 0, 10, Decay::Cosine), exa::Error);  // min_lr > lr
  EXPECT_THROW(LrSchedule(0.0, 0.0, 0, 10, Decay::Cosine), exa::Error);
  EXPECT_THROW(LrSchedule(1e-3, 0.0, -1, 10, Decay::Cosine), exa::Error);
  EXPECT_THROW(LrSchedule(1e-3, 0.0, 0, 10, Decay::Cosine).at(-1), exa::Error);
  try {
    exa::optim::parse_decay("cosin");
    FAIL();
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cosine, linear or constant"), std::string::npos) << e.what();
  }
}
