#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "optim/grad_clip.hpp"
#include "optim/optimizer.hpp"
#include "optim_test_util.hpp"

using namespace exa::optim;
using namespace exa::optim::test;
using exa::model::ParameterStore;
using exa::model::parameter_specs;

namespace {

double host_norm(const std::vector<float>& g) {
  double s = 0;
  for (float x : g) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

ParameterStore store_with_grads(double amplitude) {
  ParameterStore store(parameter_specs(tiny_model()));
  store.initialize(7);
  upload(store.grads(), by_global(store, [&](std::size_t i, std::int64_t k) { return pattern(i, k, 0, amplitude); }));
  return store;
}

}  // namespace

TEST(GradClip, NormAndScaleMatchTheHostAboveTheThreshold) {
  const auto store = store_with_grads(0.1);
  const double norm = host_norm(host(store.grads()));
  ASSERT_GT(norm, 1.0);
  const GradClipper clip(1.0);
  const auto r = clip.compute(store);
  EXPECT_TRUE(r.finite);
  EXPECT_NEAR(r.norm, norm, 1e-12 * norm);
  EXPECT_NEAR(r.clip_coef, 1.0 / (norm + 1e-6), 1e-12);
  EXPECT_TRUE(r.clipped());
  EXPECT_DOUBLE_EQ(r.grad_scale, r.clip_coef);
  // The clipped gradient's norm is max_norm (to torch's 1e-6).
  EXPECT_NEAR(r.norm * r.clip_coef, 1.0, 1e-6);
}

TEST(GradClip, NoOpBelowTheThresholdAndWithoutClipping) {
  const auto store = store_with_grads(0.01);
  const double norm = host_norm(host(store.grads()));
  ASSERT_LT(norm, 1.0);
  const auto below = GradClipper(1.0).compute(store);
  EXPECT_NEAR(below.norm, norm, 1e-12 * norm);
  EXPECT_EQ(below.clip_coef, 1.0);
  EXPECT_EQ(below.grad_scale, 1.0);
  EXPECT_FALSE(below.clipped());
  // max_norm = 0: no clipping at any norm, but the norm is still reported.
  const auto big = store_with_grads(100.0);
  const auto off = GradClipper(0.0).compute(big);
  EXPECT_NEAR(off.norm, host_norm(host(big.grads())), 1e-9 * off.norm);
  EXPECT_EQ(off.clip_coef, 1.0);
  EXPECT_EQ(off.grad_scale, 1.0);
}

TEST(GradClip, UnscaleFoldsIntoTheNormAndTheScale) {
  const auto store = store_with_grads(0.1);
  const double buf = host_norm(host(store.grads()));
  const GradClipper clip(1.0);
  const auto r = clip.compute(store, 0.25);  // e.g. grad_accum = 4
  EXPECT_NEAR(r.norm, 0.25 * buf, 1e-12 * buf);
  const double coef = std::min(1.0, 1.0 / (0.25 * buf + 1e-6));
  EXPECT_NEAR(r.clip_coef, coef, 1e-12);
  EXPECT_NEAR(r.grad_scale, 0.25 * coef, 1e-12);
}

TEST(GradClip, ReductionHookSumsTheRanksSquaredNorms) {
  const auto store = store_with_grads(0.1);
  const double local_sq = GradClipper::local_sq_norm(store);
  int calls = 0;
  double seen = 0;
  // Three ranks holding equal slices: the allreduce returns 3x this rank's value.
  GradClipper clip(1.0, [&](double x) {
    ++calls;
    seen = x;
    return 3.0 * x;
  });
  const auto r = clip.compute(store);
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(seen, local_sq);
  EXPECT_NEAR(r.norm, std::sqrt(3.0 * local_sq), 1e-12 * r.norm);
  clip.set_reduction({});  // back to identity
  EXPECT_NEAR(clip.compute(store).norm, std::sqrt(local_sq), 1e-12 * r.norm);
}

TEST(GradClip, ARankOwningNothingContributesZero) {
  const auto specs = parameter_specs(tiny_model());
  std::vector<exa::model::Shard> none(specs.size());
  const ParameterStore empty(specs, none);
  EXPECT_EQ(GradClipper::local_sq_norm(empty), 0.0);
  EXPECT_EQ(GradClipper(1.0, [](double x) { return x + 4.0; }).compute(empty).norm, 2.0);
}

TEST(GradClip, NonFiniteGradientIsReportedAndTheStepNotApplied) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto store = store_with_grads(0.1);
    auto g = host(store.grads());
    g[g.size() / 2] = bad;
    upload(store.grads(), g);
    const auto r = GradClipper(1.0).compute(store);
    EXPECT_FALSE(r.finite);
    EXPECT_EQ(r.grad_scale, 0.0);
    try {
      require_finite(r, 7);
      FAIL() << "require_finite accepted a non-finite norm";
    } catch (const exa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("step 7:"), std::string::npos) << e.what();
    }
    // Through the Optimizer: nothing changes, the step is not counted.
    Optimizer opt(store, LrSchedule(1e-2, 0.0, 0, 10, Decay::Constant), GradClipper(1.0), GradAccumulation{},
                  AdamWConfig{});
    const auto before = host(store.values());
    const auto rep = opt.step(store, 3);
    EXPECT_FALSE(rep.applied);
    EXPECT_FALSE(rep.finite());
    EXPECT_EQ(rep.step, 3);
    EXPECT_EQ(opt.adamw().step_count(), 0);
    EXPECT_EQ(host(store.values()), before);
    EXPECT_EQ(host(opt.adamw().exp_avg()), std::vector<float>(before.size(), 0.0f));
    // Applying such a scale directly is refused.
    EXPECT_THROW(opt.adamw().step(store, 1e-2, std::numeric_limits<double>::quiet_NaN()), exa::Error);
  }
  require_finite(ClipResult{}, 0);  // finite: no throw
}

TEST(GradClip, FromTheDeck) {
  const auto cfg = exa::deck::Config::from_text("[optim]\ngrad_clip = 0.5\n", "mem.toml", {}, 1);
  EXPECT_EQ(GradClipper::from_deck(cfg).max_norm(), 0.5);
  EXPECT_THROW(GradClipper(-1.0), exa::Error);
}
