#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "optim/adamw.hpp"
#include "optim/optimizer.hpp"
#include "optim_test_util.hpp"

using namespace exa::optim;
using namespace exa::optim::test;
using exa::model::ParameterStore;
using exa::model::parameter_specs;
using exa::model::Shard;

namespace {

// fp32 kernel vs double reference: after a few steps the values differ by a
// few fp32 ulps per step.
// An element near zero carries the absolute rounding of the larger terms
// that cancelled in it, hence the tolerance on the largest magnitude too
// (1e-6 of it is far below the effect of any real error: a masked decay or a
// wrong bias correction moves values by ~lr * |p| or ~lr).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, big = 0;
  std::size_t at = 0;
  for (double w : want) big = std::max(big, std::abs(w));
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double tol = 2e-6 * std::abs(want[k]) + 1e-6 * big;
    const double e = std::abs(got[k] - want[k]) / tol;
    if (e > worst) worst = e, at = k;
  }
  std::printf("%s: worst |error| / tolerance = %.3g\n", what, worst);
  EXPECT_LE(worst, 1.0) << what << ": worst element " << at << " got " << got[at] << " want " << want[at];
}

std::vector<double> grads_d(const ParameterStore& s) {
  const auto g = host(s.grads());
  return std::vector<double>(g.begin(), g.end());
}

}  // namespace

TEST(AdamW, FiveStepsMatchTorchAdamWWithDecayMaskedForNorms) {
  ParameterStore store(parameter_specs(tiny_model()));
  store.initialize(11);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(store, cfg);
  auto ref = host_reference(store, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
  const double lrs[] = {1e-2, 2e-2, 1.5e-2, 5e-3, 1e-2};
  const double scales[] = {1.0, 0.5, 1.0, 0.25, 2.0};  // grad_scale passed through
  for (int s = 0; s < 5; ++s) {
    upload(store.grads(), by_global(store, [&](std::size_t i, std::int64_t k) { return pattern(i, k, s, 0.05); }));
    auto g = grads_d(store);
    for (auto& x : g) x *= scales[s];
    ref.update(g, lrs[s], 0.0);
    opt.step(store, lrs[s], scales[s]);
    EXPECT_EQ(opt.step_count(), s + 1);
  }
  expect_close(host(store.values()), ref.p, "values");
  expect_close(host(opt.exp_avg()), ref.m, "exp_avg");
  // v ~ g^2: compare with a tolerance relative to it alone.
  const auto v = host(opt.exp_avg_sq());
  for (std::size_t k = 0; k < v.size(); ++k) ASSERT_NEAR(v[k], ref.v[k], 2e-6 * ref.v[k] + 1e-20) << k;
}

TEST(AdamW, DecayAppliesToMatricesOnly) {
  ParameterStore store(parameter_specs(tiny_model()));
  store.initialize(3);
  store.zero_grads();
  const auto before = host(store.values());
  AdamW opt(store, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  opt.step(store, 0.5, 1.0);  // zero gradient: only the decay moves anything
  const auto after = host(store.values());
  const float factor = static_cast<float>(1.0 - 0.5 * 0.1);
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& spec = store.spec(i);
    for (std::int64_t k = 0; k < store.shard(i).count; ++k) {
      const auto j = static_cast<std::size_t>(store.local_offset(i) + k);
      if (spec.weight_decay) {
        ASSERT_EQ(after[j], before[j] * factor) << spec.name;
      } else {
        ASSERT_EQ(after[j], before[j]) << spec.name;  // norm gains stay at 1
        ASSERT_EQ(after[j], 1.0f) << spec.name;
      }
    }
  }
  // Merged runs of same-decay tensors: fewer launches than tensors, and
  // every tensor boundary where the flag changes is a launch boundary.
  std::size_t changes = 1;
  for (std::size_t i = 1; i < store.size(); ++i) changes += store.spec(i).weight_decay != store.spec(i - 1).weight_decay;
  EXPECT_EQ(opt.launches_per_step(), changes);
  EXPECT_LT(opt.launches_per_step(), store.size());
}

TEST(AdamW, StateAccessorsBytesAndReset) {
  ParameterStore store(parameter_specs(tiny_model()));
  store.initialize(5);
  AdamW opt(store, AdamWConfig{0.8, 0.9, 1e-8, 0.0});
  EXPECT_EQ(opt.size(), store.size());
  EXPECT_EQ(opt.bytes(), 2 * sizeof(float) * static_cast<std::size_t>(store.local_numel()));
  upload(store.grads(), by_global(store, [](std::size_t i, std::int64_t k) { return pattern(i, k, 0, 1.0); }));
  opt.step(store, 1e-3, 0.5);
  // After one step: exp_avg = (1 - beta1) g', exp_avg_sq = (1 - beta2) g'^2, g' = 0.5 g.
  std::size_t i = 0;  // a 3-D expert tensor (whichever layer is MoE)
  while (store.spec(i).name.find("experts.w2") == std::string::npos) ++i;
  const auto g = host(store.grad(i)), m = host(opt.exp_avg(i)), v = host(opt.exp_avg_sq(i));
  ASSERT_EQ(m.size(), static_cast<std::size_t>(store.spec(i).numel()));
  for (std::size_t k = 0; k < g.size(); ++k) {
    const float gs = g[k] * 0.5f;
    ASSERT_FLOAT_EQ(m[k], 0.2f * gs);
    ASSERT_NEAR(v[k], 0.1f * gs * gs, 1e-6f * gs * gs);
  }
  // The per-tensor views alias the flat buffers (the checkpoint reads/writes through them).
  EXPECT_EQ(opt.exp_avg(i).data(), opt.exp_avg().data() + store.local_offset(i));
  EXPECT_EQ(opt.exp_avg_sq(i).data(), opt.exp_avg_sq().data() + store.local_offset(i));
  opt.set_step_count(41);
  EXPECT_EQ(opt.step_count(), 41);
  opt.reset();
  EXPECT_EQ(opt.step_count(), 0);
  const auto m0 = host(opt.exp_avg()), v0 = host(opt.exp_avg_sq());
  EXPECT_EQ(m0, std::vector<float>(m0.size(), 0.0f));
  EXPECT_EQ(v0, std::vector<float>(v0.size(), 0.0f));
  EXPECT_THROW(AdamW(store, AdamWConfig{1.0, 0.9, 1e-8, 0.0}), exa::Error);
}

// What ZeRO relies on: two ranks each owning half of every tensor, each with
// its own optimizer state, produce the whole-store run's values, and the
// clipping norm agrees once the reduction hook sums the two ranks.
TEST(AdamW, ShardedStoresReproduceTheWholeStore) {
  const auto specs = parameter_specs(tiny_model());
  std::vector<Shard> lo, hi;
  for (const auto& s : specs) {
    lo.push_back(Shard{0, s.numel() / 2});
    hi.push_back(Shard{s.numel() / 2, s.numel() - s.numel() / 2});
  }
  ParameterStore whole(specs), a(specs, lo), b(specs, hi);
  for (auto* s : {&whole, &a, &b}) s->initialize(9);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  AdamW ow(whole, cfg), oa(a, cfg), ob(b, cfg);
  EXPECT_EQ(oa.bytes() + ob.bytes(), ow.bytes());
  for (int s = 0; s < 4; ++s) {
    auto f = [&](std::size_t i, std::int64_t k) { return pattern(i, k, s, 0.1); };
    upload(whole.grads(), by_global(whole, f));
    upload(a.grads(), by_global(a, f));
    upload(b.grads(), by_global(b, f));
    const double sa = GradClipper::local_sq_norm(a), sb = GradClipper::local_sq_norm(b);
    const auto rw = GradClipper(1.0).compute(whole);
    const auto ra = GradClipper(1.0, [&](double x) { return x + sb; }).compute(a);
    const auto rb = GradClipper(1.0, [&](double x) { return sa + x; }).compute(b);
    ASSERT_TRUE(rw.clipped());
    EXPECT_NEAR(ra.norm, rw.norm, 1e-12 * rw.norm);
    EXPECT_EQ(ra.grad_scale, rb.grad_scale);
    // Use one scale everywhere so the comparison below can be exact.
    ow.step(whole, 1e-2, rw.grad_scale);
    oa.step(a, 1e-2, rw.grad_scale);
    ob.step(b, 1e-2, rw.grad_scale);
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto x = host(a.value(i)), y = host(b.value(i));
    x.insert(x.end(), y.begin(), y.end());
    ASSERT_EQ(x, host(whole.value(i))) << specs[i].name;
    auto m = host(oa.exp_avg_sq(i)), n = host(ob.exp_avg_sq(i));
    m.insert(m.end(), n.begin(), n.end());
    ASSERT_EQ(m, host(ow.exp_avg_sq(i))) << specs[i].name;
  }
}

// The whole optimizer step (schedule, clipping, masked decay) over 5 steps
// against the host reference, with clipping active on some steps only.
TEST(Optimizer, FiveStepsWithWarmupCosineAndClippingMatchTheHostReference) {
  ParameterStore store(parameter_specs(tiny_model()));
  store.initialize(13);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const LrSchedule sched(1e-2, 1e-3, 2, 5, Decay::Cosine);
  Optimizer opt(store, sched, GradClipper(1.0), GradAccumulation{}, cfg);
  auto ref = host_reference(store, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
  const double amp[] = {0.2, 0.01, 0.1, 0.005, 0.05};
  int clipped = 0;
  for (int s = 0; s < 5; ++s) {
    upload(store.grads(), by_global(store, [&](std::size_t i, std::int64_t k) { return pattern(i, k, s, amp[s]); }));
    const double norm = ref.update(grads_d(store), sched.at(s), 1.0);
    const auto r = opt.step(store, s);
    EXPECT_TRUE(r.applied);
    EXPECT_DOUBLE_EQ(r.lr, sched.at(s));
    EXPECT_NEAR(r.clip.norm, norm, 1e-12 * norm);
    clipped += r.clip.clipped();
  }
  EXPECT_GT(clipped, 0);
  EXPECT_LT(clipped, 5);
  EXPECT_EQ(opt.adamw().step_count(), 5);
  expect_close(host(store.values()), ref.p, "values");
  expect_close(host(opt.adamw().exp_avg()), ref.m, "exp_avg");
}

TEST(Optimizer, FromTheDeck) {
  const auto cfg = exa::deck::Config::from_text(
      "[train]\nsteps = 50\ngrad_accum = 4\n[optim]\nlr = 1e-3\nbeta2 = 0.99\neps = 1e-6\nweight_decay = 0.05\n"
      "grad_clip = 2.0\nwarmup_steps = 5\n[precision]\nloss_scale = 8.0\n",
      "mem.toml", {}, 1);
  ParameterStore store(parameter_specs(tiny_model()));
  Optimizer opt(store, cfg);
  EXPECT_EQ(opt.schedule().total_steps(), 50);
  EXPECT_DOUBLE_EQ(opt.schedule().at(4), 1e-3);
  EXPECT_EQ(opt.clipper().max_norm(), 2.0);
  EXPECT_EQ(opt.accumulation().micro_batches, 4);
  EXPECT_EQ(opt.accumulation().backward_seed(), 8.0);
  EXPECT_EQ(opt.accumulation().unscale(), 1.0 / 32.0);
  EXPECT_EQ(opt.adamw().config().beta1, 0.9);
  EXPECT_EQ(opt.adamw().config().beta2, 0.99);
  EXPECT_EQ(opt.adamw().config().eps, 1e-6);
  EXPECT_EQ(opt.adamw().config().weight_decay, 0.05);
  EXPECT_EQ(opt.bytes(), 8u * static_cast<std::size_t>(store.local_numel()));
}
