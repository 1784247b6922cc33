// LoRA's model side: the adapters' specs (shapes, tensor-parallel splits,
// frozen base), and the zero_b start: with B = 0 the adapted model's loss
// is the frozen model's, bit for bit, while a non-zero B changes it.
#include <gtest/gtest.h>

#include <string>

#include "model/parameter_specs.hpp"
#include "model/transformer.hpp"
#include "model_test_util.hpp"

using namespace exa::model;

namespace {

ModelConfig with_lora(ModelConfig c, std::int64_t rank) {
  c.lora.rank = rank;
  c.lora.alpha = 8.0;
  c.lora.targets = {true, true, true, true, true, true};
  return c;
}

const ParamSpec& spec(const std::vector<ParamSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  throw std::runtime_error("no spec " + name);
}

TEST(LoraSpecs, AdaptersFollowTheirMatrixAndTheBaseIsFrozen) {
  const auto c = with_lora(exa::test::small(), 4);
  const auto specs = parameter_specs(c);
  const std::int64_t d = c.d_model, hd = c.head_dim();
  for (const auto& s : specs) EXPECT_EQ(s.trainable, s.name.find(".lora_") != std::string::npos) << s.name;
  // Column-parallel wq [H*hd, d]: A whole, B split with W's output rows.
  const auto& qa = spec(specs, "layers.0.attn.wq.lora_a");
  const auto& qb = spec(specs, "layers.0.attn.wq.lora_b");
  EXPECT_EQ(qa.shape, (std::vector<std::int64_t>{4, d}));
  EXPECT_EQ(qb.shape, (std::vector<std::int64_t>{c.n_heads * hd, 4}));
  EXPECT_EQ(qa.tp_dim, -1);
  EXPECT_EQ(qb.tp_dim, 0);
  EXPECT_EQ(qb.init, ParamSpec::Init::Zeros);
  // Row-parallel wo [d, H*hd]: A split with W's input columns, B whole.
  EXPECT_EQ(spec(specs, "layers.0.attn.wo.lora_a").tp_dim, 1);
  EXPECT_EQ(spec(specs, "layers.0.attn.wo.lora_b").tp_dim, -1);
  // Shared expert w2 [S, d, F]: A [S, r, F] split on F, B [S, d, r] whole.
  const auto& sa = spec(specs, "layers.1.moe.shared.w2.lora_a");
  EXPECT_EQ(sa.shape, (std::vector<std::int64_t>{1, 4, c.d_expert}));
  EXPECT_EQ(sa.tp_dim, 2);
  EXPECT_EQ(spec(specs, "layers.1.moe.shared.w2.lora_b").tp_dim, -1);
  // A routed expert's adapters live with it: split over ep (dim 0) like W,
  // and over the expert-tensor-parallel F like W's F side.
  const auto& ea = spec(specs, "layers.1.moe.experts.w1.lora_a");
  const auto& eb = spec(specs, "layers.1.moe.experts.w1.lora_b");
  EXPECT_EQ(ea.shape, (std::vector<std::int64_t>{c.n_experts, 4, d}));
  EXPECT_EQ(eb.shape, (std::vector<std::int64_t>{c.n_experts, c.d_expert, 4}));
  EXPECT_EQ(ea.ep_dim, 0);
  EXPECT_EQ(eb.ep_dim, 0);
  EXPECT_EQ(ea.tp_dim, -1);
  EXPECT_EQ(eb.tp_dim, 1);
  EXPECT_EQ(ea.reduce, ReduceGroup::ExpertData);
  // The embedding [V, d] is split by vocabulary: so is its B [V, r].
  EXPECT_EQ(spec(specs, "embed.lora_b").tp_dim, 0);
  EXPECT_EQ(spec(specs, "embed.lora_a").shape, (std::vector<std::int64_t>{4, d}));
  // The router [E, d] is whole on every rank: so are its adapters.
  EXPECT_EQ(spec(specs, "layers.1.moe.router.lora_b").shape, (std::vector<std::int64_t>{c.n_experts, 4}));
  EXPECT_EQ(spec(specs, "layers.1.moe.router.lora_a").tp_dim, -1);
  EXPECT_EQ(spec(specs, "layers.1.moe.router.lora_b").tp_dim, -1);
  EXPECT_EQ(lora_b_name("layers.0.mlp.w1"), "layers.0.mlp.w1.lora_b");
  EXPECT_EQ(lora_a_name("layers.0.attn.wq.weight"), "layers.0.attn.wq.lora_a");
  EXPECT_TRUE(is_lora_adapter("embed.lora_b"));
  EXPECT_FALSE(is_lora_adapter("layers.0.mlp.w1"));
  // Without [lora] nothing changes: every tensor trains, no adapter.
  for (const auto& s : parameter_specs(exa::test::small())) EXPECT_TRUE(s.trainable) << s.name;
}

// Loss of the base model (values from `seed`) and of the adapted one on
// the same base values, with B = 0 (zero_b) or random.
struct Losses {
  double base, adapted;
};
Losses losses(bool zero_b) {
  const auto base_cfg = exa::test::small(), cfg = with_lora(base_cfg, 4);
  const auto base_flat = exa::test::random_flat<float>(base_cfg, 7);
  auto flat = exa::test::random_flat<float>(cfg, 11);
  // The adapted model's base tensors are the base model's, B zero or not.
  const auto bspecs = parameter_specs(base_cfg), specs = parameter_specs(cfg);
  const auto boff = flat_offsets(bspecs), off = flat_offsets(specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto r = Kokkos::make_pair(off[i], off[i] + specs[i].numel());
    if (!specs[i].trainable) {
      std::size_t j = 0;
      while (bspecs[j].name != specs[i].name) ++j;
      Kokkos::deep_copy(Kokkos::subview(flat, r),
                        Kokkos::subview(base_flat, Kokkos::make_pair(boff[j], boff[j] + bspecs[j].numel())));
    } else if (zero_b && specs[i].init == ParamSpec::Init::Zeros) {
      Kokkos::deep_copy(Kokkos::subview(flat, r), 0.0f);
    }
  }
  const auto in = exa::test::tokens(2, base_cfg.seq_len, base_cfg.vocab_size, 3);
  const auto tg = exa::test::shifted(in, base_cfg.vocab_size, 3);
  Transformer<float> base(base_cfg), adapted(cfg);
  const double lb = base.forward(bind_flat(base_cfg, base_flat), in, tg).loss.loss;
  const double la = adapted.forward(bind_flat(cfg, flat), in, tg).loss.loss;
  return {lb, la};
}

TEST(LoraZeroB, StepZeroIsTheFrozenModelExactly) {
  const auto l = losses(true);
  EXPECT_EQ(l.base, l.adapted);  // bitwise: the adapter adds exact zeros
}

// lora.dropout: a training forward's masks are a function of the key and
// the forward's number since set_dropout_key, so the same key repeats the
// loss and another changes it; without dropout the key does nothing.
TEST(LoraDropout, MasksFollowTheKey) {
  auto cfg = with_lora(exa::test::small(), 4);
  cfg.lora.dropout = 0.5;
  const auto flat = exa::test::random_flat<float>(cfg, 11);  // B random: the adapters act
  const auto in = exa::test::tokens(2, cfg.seq_len, cfg.vocab_size, 3);
  const auto tg = exa::test::shifted(in, cfg.vocab_size, 3);
  auto loss = [&](const ModelConfig& c, std::uint64_t key) {
    Transformer<float> m(c);
    m.set_dropout_key(key);
    return m.forward(bind_flat(c, flat), in, tg).loss.loss;
  };
  EXPECT_EQ(loss(cfg, 5), loss(cfg, 5));
  EXPECT_NE(loss(cfg, 5), loss(cfg, 6));
  auto none = cfg;
  none.lora.dropout = 0.0;
  EXPECT_EQ(loss(none, 5), loss(none, 6));
  EXPECT_NE(loss(none, 5), loss(cfg, 5));
}

TEST(LoraZeroB, ANonZeroBChangesTheLoss) {
  const auto l = losses(false);
  EXPECT_GT(std::abs(l.base - l.adapted), 1e-4) << "the adapters are not in the forward";
}

}  // namespace
