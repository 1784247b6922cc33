#include <gtest/gtest.h>

#include <cmath>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "model/parameter_store.hpp"

using namespace exa::model;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 16;
  c.moe_every = 2;  // layer 0 dense, layer 1 MoE
  c.n_shared_experts = 1;
  return c;
}

std::vector<float> host(const ParameterStore::Flat& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

}  // namespace

TEST(ParameterSpecs, NamesAndShapesFollowTheCheckpointContract) {
  const auto specs = parameter_specs(tiny());
  auto find = [&](const std::string& n) -> const ParamSpec& {
    for (const auto& s : specs)
      if (s.name == n) return s;
    ADD_FAILURE() << "missing " << n;
    return specs.front();
  };
  EXPECT_EQ(find("embed.weight").shape, (std::vector<std::int64_t>{256, 32}));
  EXPECT_EQ(find("layers.0.attn.wq.weight").shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(find("layers.0.attn.wk.weight").shape, (std::vector<std::int64_t>{16, 32}));  // GQA: 2 kv heads * hd 8
  EXPECT_EQ(find("layers.0.attn.wo.weight").shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(find("layers.1.moe.router.weight").shape, (std::vector<std::int64_t>{4, 32}));
  EXPECT_EQ(find("layers.1.moe.experts.w1").shape, (std::vector<std::int64_t>{4, 16, 32}));
  EXPECT_EQ(find("layers.1.moe.experts.w2").shape, (std::vector<std::int64_t>{4, 32, 16}));
  EXPECT_EQ(find("layers.1.moe.shared.w3").shape, (std::vector<std::int64_t>{1, 16, 32}));
  EXPECT_EQ(find("layers.0.mlp.w1").shape, (std::vector<std::int64_t>{48, 32}));
  EXPECT_EQ(find("layers.0.mlp.w2").shape, (std::vector<std::int64_t>{32, 48}));
  EXPECT_EQ(find("norm.weight").shape, (std::vector<std::int64_t>{32}));
  EXPECT_EQ(find("lm_head.weight").shape, (std::vector<std::int64_t>{256, 32}));
  EXPECT_FALSE(find("layers.0.ffn_norm.weight").weight_decay);
  EXPECT_TRUE(find("layers.0.mlp.w3").weight_decay);
  EXPECT_DOUBLE_EQ(find("layers.0.mlp.w2").init_std, 0.02 / 2.0);  // 1/sqrt(2L), L = 2

  auto tied = tiny();
  tied.tie_embeddings = true;
  for (const auto& s : parameter_specs(tied)) EXPECT_NE(s.name, "lm_head.weight");
}

TEST(ParameterStore, InitIsIndependentOfTheSlicing) {
  const auto specs = parameter_specs(tiny());
  ParameterStore whole(specs);
  whole.initialize(42);
  // Two "ranks" each owning one half of every tensor must draw the same values.
  std::vector<Shard> lo, hi;
  for (const auto& s : specs) {
    lo.push_back(Shard{0, s.numel() / 2});
    hi.push_back(Shard{s.numel() / 2, s.numel() - s.numel() / 2});
  }
  ParameterStore a(specs, lo), b(specs, hi);
  a.initialize(42);
  b.initialize(42);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto w = host(whole.value(i)), x = host(a.value(i)), y = host(b.value(i));
    x.insert(x.end(), y.begin(), y.end());
    ASSERT_EQ(w, x) << specs[i].name;
  }
}

TEST(ParameterStore, NormsStartAtOneAndMatricesAtTheirStd) {
  ParameterStore s(parameter_specs(tiny()));
  s.initialize(7);
  for (float v : host(s.value("norm.weight"))) EXPECT_EQ(v, 1.0f);
  const auto e = host(s.value("embed.weight"));
  double m2 = 0;
  for (float v : e) m2 += double(v) * v;
  EXPECT_NEAR(std::sqrt(m2 / e.size()), 0.02, 0.002);
  EXPECT_THROW(s.index("layers.9.attn.wq.weight"), exa::Error);
}

TEST(ModelConfig, ReadsTheDeckAndDerivesCapacity) {
  auto cfg = exa::deck::Config::load(std::string(EXAMOE_SOURCE_DIR) + "/input/tiny.toml",
                                     {"moe.capacity_factor=1.25"}, 1);
  const auto m = ModelConfig::from_deck(cfg);
  EXPECT_EQ(m.d_model, 128);
  EXPECT_EQ(m.n_kv_heads, m.n_heads);
  EXPECT_EQ(m.expert_capacity(1024), static_cast<std::int64_t>(std::ceil(1.25 * 1024 * m.top_k / m.n_experts)));
  EXPECT_TRUE(m.is_moe_layer(0));
}
