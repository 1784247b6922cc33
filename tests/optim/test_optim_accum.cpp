// Gradient accumulation (optim/grad_accum.hpp): the accumulated buffer of n
// micro-batch gradients, with unscale = 1/(n * loss_scale) folded into the
// norm and the update, gives exactly the update of one micro-batch carrying
// their mean.
#include <gtest/gtest.h>

#include "optim/optimizer.hpp"
#include "optim_test_util.hpp"

using namespace exa::optim;
using namespace exa::optim::test;
using exa::model::ParameterStore;
using exa::model::parameter_specs;

namespace {

struct Run {
  ParameterStore store;
  Optimizer opt;
  Run(GradAccumulation acc, double max_norm)
      : store(parameter_specs(tiny_model())),
        opt(store, LrSchedule(1e-2, 1e-3, 1, 4, Decay::Cosine), GradClipper(max_norm), acc,
            AdamWConfig{0.9, 0.95, 1e-8, 0.1}) {
    store.initialize(21);
  }
};

std::vector<float> micro_grad(const ParameterStore& s, int step, int micro) {
  return by_global(s, [&](std::size_t i, std::int64_t k) { return pattern(i, k, 10 * step + micro, 0.1 + 0.05 * micro); });
}

// Micro-batch backwards adding into the zeroed buffer, as the trainer does.
void accumulate(ParameterStore& s, const std::vector<std::vector<float>>& micro, float seed) {
  s.zero_grads();
  std::vector<float> buf(static_cast<std::size_t>(s.local_numel()), 0.0f);
  for (const auto& g : micro)
    for (std::size_t k = 0; k < buf.size(); ++k) buf[k] += seed * g[k];
  upload(s.grads(), buf);
}

void expect_same_run(double max_norm, double loss_scale) {
  Run two(GradAccumulation{2, loss_scale}, max_norm), one(GradAccumulation{1, 1.0}, max_norm);
  for (int s = 0; s < 4; ++s) {
    const auto g1 = micro_grad(two.store, s, 0), g2 = micro_grad(two.store, s, 1);
    accumulate(two.store, {g1, g2}, static_cast<float>(two.opt.accumulation().backward_seed()));
    std::vector<float> mean(g1.size());
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] = (g1[k] + g2[k]) / 2;
    accumulate(one.store, {mean}, 1.0f);
    const auto r2 = two.opt.step(two.store, s), r1 = one.opt.step(one.store, s);
    EXPECT_EQ(r2.clip.norm, r1.clip.norm) << "step " << s;
    EXPECT_EQ(r2.clip.clip_coef, r1.clip.clip_coef) << "step " << s;
    if (max_norm > 0) {
      EXPECT_TRUE(r1.clip.clipped());
    }
  }
  // Bit-identical: scaling by powers of two is exact.
  EXPECT_EQ(host(two.store.values()), host(one.store.values()));
  EXPECT_EQ(host(two.opt.adamw().exp_avg()), host(one.opt.adamw().exp_avg()));
  EXPECT_EQ(host(two.opt.adamw().exp_avg_sq()), host(one.opt.adamw().exp_avg_sq()));
}

}  // namespace

TEST(GradAccumulation, TwoMicroBatchesEqualOneCarryingTheirMean) { expect_same_run(0.0, 1.0); }

TEST(GradAccumulation, TwoMicroBatchesEqualOneCarryingTheirMeanWithClipping) { expect_same_run(1.0, 1.0); }

TEST(GradAccumulation, StaticLossScaleIsDividedOut) { expect_same_run(1.0, 1024.0); }

TEST(GradAccumulation, Factors) {
  const GradAccumulation g{4, 2.0};
  EXPECT_EQ(g.backward_seed(), 2.0);
  EXPECT_EQ(g.unscale(), 0.125);
  EXPECT_EQ(g.step_loss(10.0), 2.5);
}
