// Aux-loss-free balancing state (model/router_bias.hpp): the update rule,
// its bookkeeping, and its effect on a model's routing through
// StageModel::set_router_bias.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "model/parameter_store.hpp"
#include "model/router_bias.hpp"
#include "model/transformer.hpp"
#include "model_test_util.hpp"

using namespace exa::model;
using namespace exa::test;

TEST(RouterBias, StartsAtZeroForEveryMoeLayer) {
  auto cfg = small();
  cfg.n_layers = 4;  // moe_every = 2: layers 1 and 3
  const RouterBias b(cfg);
  EXPECT_EQ(b.layers(), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(b.shape(), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(b.values(), std::vector<float>(8, 0.0f));
  EXPECT_THROW(b.row(0), exa::Error);  // dense layer
}

// b_e += rate * sign(mean - load_e): below the mean up, above down, at the
// mean unchanged; only the updated layer moves.
TEST(RouterBias, UpdateMovesAgainstTheLoad) {
  auto cfg = small();
  cfg.n_layers = 4;
  RouterBias b(cfg);
  const float r = 1e-3f;
  b.update(3, {10, 2, 5, 3}, r);  // mean 5
  EXPECT_EQ(b.row(3), (std::vector<float>{-r, r, 0.0f, r}));
  EXPECT_EQ(b.row(1), std::vector<float>(4, 0.0f));
  b.update(3, {10, 2, 5, 3}, r);
  EXPECT_EQ(b.row(3), (std::vector<float>{-r - r, r + r, 0.0f, r + r}));
  // Means that are not integers: 7 tokens over 4 experts (mean 1.75).
  b.update(1, {2, 2, 2, 1}, r);
  EXPECT_EQ(b.row(1), (std::vector<float>{-r, -r, -r, r}));
  // Balanced: nothing moves.
  const auto before = b.values();
  b.update(1, {4, 4, 4, 4}, r);
  EXPECT_EQ(b.values(), before);
  EXPECT_THROW(b.update(1, {1, 2, 3}, r), exa::Error);  // 3 loads for 4 experts
  EXPECT_THROW(b.update(0, {1, 2, 3, 4}, r), exa::Error);  // dense layer
}

TEST(RouterBias, SetValuesChecksTheShape) {
  RouterBias b(small());
  EXPECT_THROW(b.set_values(std::vector<float>(3, 0.0f)), exa::Error);
  b.set_values({0.5f, -0.5f, 0.25f, 0.0f});
  EXPECT_EQ(b.row(1), (std::vector<float>{0.5f, -0.5f, 0.25f, 0.0f}));
}

// A bias far above any probability sends every token to the favoured
// expert; removing it restores the unbiased forward bit for bit. The bias
// enters the selection only: with top_k = E every expert is chosen whatever
// the bias, with its unbiased gate, and the loss is unchanged (up to the
// order of the sum over a token's experts).
TEST(RouterBias, SteersTheModelsRoutingOnly) {
  auto cfg = small();
  ParameterStore store(parameter_specs(cfg));
  store.initialize(7);
  const auto w = bind_values(cfg, store);
  Transformer<float> model(cfg);
  const auto in = tokens(2, 16, cfg.vocab_size, 3);
  const auto tg = shifted(in, cfg.vocab_size, 3);
  const auto r0 = model.forward(w, in, tg);
  ASSERT_EQ(r0.routing.size(), 1u);

  RouterBias b(cfg);
  b.set_values({0.0f, 0.0f, 5.0f, 0.0f});
  b.apply(model);
  const auto r1 = model.forward(w, in, tg);
  EXPECT_EQ(r1.routing[0].routed[2], r1.n_tokens) << "every token picks expert 2";
  EXPECT_NE(r1.loss.loss, r0.loss.loss);

  model.set_router_bias(1, {});
  const auto r2 = model.forward(w, in, tg);
  EXPECT_EQ(r2.loss.loss, r0.loss.loss);
  EXPECT_EQ(r2.routing[0].routed, r0.routing[0].routed);

  auto all = cfg;
  all.top_k = all.n_experts;
  Transformer<float> full(all);
  const auto f0 = full.forward(w, in, tg);
  full.set_router_bias(1, {3.0f, -1.0f, 0.5f, 2.0f});
  const auto f1 = full.forward(w, in, tg);
  EXPECT_NEAR(f1.loss.ce, f0.loss.ce, 1e-5 * f0.loss.ce);

  EXPECT_THROW(model.set_router_bias(0, {0, 0, 0, 0}), exa::Error);  // dense
  EXPECT_THROW(model.set_router_bias(1, {0, 0, 0}), exa::Error);     // 3 of 4 experts
}
