// Partitioned parameters: the partition rules of every tensor (ParamSpec
// tp_dim, ep_dim, reduce), boxes from partition_box, and ParameterStores
// holding box pieces (and ZeRO ranges inside them) initialised to exactly
// the whole model's values at those positions.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/init.hpp"
#include "model/parameter_store.hpp"
#include "model/shard.hpp"

using namespace exa::model;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 4;
  c.moe_every = 2;  // layer 0 dense, layer 1 MoE
  c.n_shared_experts = 1;
  return c;
}

std::vector<float> host(const ParameterStore::Flat& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The box's elements of a whole tensor in the box's row-major order, by
// walking its coordinates.
std::vector<float> slice(const std::vector<float>& whole, const std::vector<std::int64_t>& shape, const Box& b) {
  std::vector<float> out;
  const std::size_t n = shape.size();
  for (std::int64_t k = 0; k < b.numel(); ++k) {
    std::int64_t rem = k, g = 0;
    std::vector<std::int64_t> c(n);
    for (std::size_t d = n; d-- > 0;) {
      c[d] = b.offset[d] + rem % b.extent[d];
      rem /= b.extent[d];
    }
    for (std::size_t d = 0; d < n; ++d) g = g * shape[d] + c[d];
    out.push_back(whole[static_cast<std::size_t>(g)]);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

}  // namespace

TEST(ParamSpecPartition, EveryTensorHasItsRule) {
  struct Want {
    const char* suffix;
    int tp_dim, ep_dim;
    ReduceGroup reduce;
  };
  const ReduceGroup D = ReduceGroup::Data, X = ReduceGroup::ExpertData;
  const std::vector<Want> rules = {
      {"embed.weight", 0, -1, D},       {"attn_norm.weight", -1, -1, D}, {"attn.wq.weight", 0, -1, D},
      {"attn.wk.weight", 0, -1, D},     {"attn.wv.weight", 0, -1, D},    {"attn.wo.weight", 1, -1, D},
      {"ffn_norm.weight", -1, -1, D},   {"mlp.w1", 0, -1, D},            {"mlp.w3", 0, -1, D},
      {"mlp.w2", 1, -1, D},             {"moe.router.weight", -1, -1, D}, {"moe.experts.w1", 1, 0, X},
      {"moe.experts.w3", 1, 0, X},      {"moe.experts.w2", 2, 0, X},     {"moe.shared.w1", 1, -1, D},
      {"moe.shared.w3", 1, -1, D},      {"moe.shared.w2", 2, -1, D},     {"norm.weight", -1, -1, D},
      {"lm_head.weight", 0, -1, D},
  };
  const auto specs = parameter_specs(tiny());
  std::vector<int> used(rules.size(), 0);
  for (const auto& s : specs) {
    int hits = 0;
    for (std::size_t r = 0; r < rules.size(); ++r) {
      // "norm.weight" also ends "attn_norm.weight": match whole name parts.
      const std::string suf = rules[r].suffix;
      if (!(s.name == suf || ends_with(s.name, "." + suf))) continue;
      ++hits;
      ++used[r];
      EXPECT_EQ(s.tp_dim, rules[r].tp_dim) << s.name;
      EXPECT_EQ(s.ep_dim, rules[r].ep_dim) << s.name;
      EXPECT_EQ(s.reduce, rules[r].reduce) << s.name;
    }
    EXPECT_EQ(hits, 1) << s.name;
    // The dimensions exist, and the expert dimension is E.
    EXPECT_LT(s.tp_dim, static_cast<int>(s.shape.size())) << s.name;
    if (s.ep_dim >= 0) EXPECT_EQ(s.shape[static_cast<std::size_t>(s.ep_dim)], tiny().n_experts) << s.name;
  }
  for (std::size_t r = 0; r < rules.size(); ++r) EXPECT_GE(used[r], 1) << rules[r].suffix;
  // The FFN dimension is what expert tensor parallelism splits.
  for (const auto& s : specs) {
    if (s.name.find("moe.experts.") != std::string::npos || s.name.find("moe.shared.") != std::string::npos) {
      EXPECT_EQ(s.shape[static_cast<std::size_t>(s.tp_dim)], tiny().d_expert) << s.name;
    }
  }
}

TEST(PartitionBox, SplitsEvenlyAndComposes) {
  const auto specs = parameter_specs(tiny());
  auto spec = [&](const std::string& n) {
    for (const auto& s : specs)
      if (s.name == n) return s;
    throw std::runtime_error("no " + n);
  };
  const auto w1 = spec("layers.0.mlp.w1");  // [12, 8]
  EXPECT_EQ(partition_box(w1, 0, 4, 2), (Box{{6, 0}, {3, 8}}));
  EXPECT_EQ(partition_box(w1, 1, 2, 1), (Box{{0, 4}, {12, 4}}));
  EXPECT_EQ(partition_box(w1, 0, 1, 0), whole_box(w1.shape));
  // Expert parallelism on E, then expert tensor parallelism on F.
  const auto ex = spec("layers.1.moe.experts.w2");  // [4, 8, 4]
  const Box ep = partition_box(ex, ex.ep_dim, 2, 1);
  EXPECT_EQ(ep, (Box{{2, 0, 0}, {2, 8, 4}}));
  EXPECT_EQ(partition_box(ex, ep, ex.tp_dim, 4, 3), (Box{{2, 0, 3}, {2, 8, 1}}));

  try {
    partition_box(w1, 1, 3, 0);  // 8 columns in 3 parts
    ADD_FAILURE() << "no error";
  } catch (const exa::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'layers.0.mlp.w1'"), std::string::npos) << m;
    EXPECT_NE(m.find("dimension 1"), std::string::npos) << m;
    EXPECT_NE(m.find("extent there is 8"), std::string::npos) << m;
    EXPECT_NE(m.find("3 equal parts"), std::string::npos) << m;
  }
  EXPECT_THROW(partition_box(w1, 2, 2, 0), exa::Error);   // no dimension 2
  EXPECT_THROW(partition_box(w1, 0, 2, 2), exa::Error);   // no part 2 of 2
  EXPECT_THROW(partition_box(w1, -1, 2, 0), exa::Error);  // replicated tensors have no split dimension
}

// layers.0.mlp.w1 split on dimension 0 and layers.0.attn.wo.weight on
// dimension 1, in 2 and 4 parts: each part initialised from Philox is the
// corresponding slice of the whole tensor, bit for bit; so is a ZeRO range
// inside a part. The rest of the store is whole and unchanged.
TEST(ParameterStore, BoxPiecesInitialiseAsSlicesOfTheWholeTensor) {
  const auto specs = parameter_specs(tiny());
  ParameterStore whole(specs);
  whole.initialize(42);
  // The whole store is kernels::init_normal of each whole tensor.
  {
    const std::size_t i = whole.index("layers.0.mlp.w1");
    ParameterStore::Flat ref("ref", static_cast<std::size_t>(specs[i].numel()));
    exa::kernels::init_normal(ref, 42, specs[i].name, specs[i].init_std);
    EXPECT_TRUE(same_bits(host(ref), host(whole.value(i))));
  }
  const std::vector<std::pair<std::string, int>> split = {{"layers.0.mlp.w1", 0}, {"layers.0.attn.wo.weight", 1}};
  for (int parts : {2, 4}) {
    for (int k = 0; k < parts; ++k) {
      for (bool zero : {false, true}) {
        std::vector<Shard> shards = whole_shards(specs);
        for (const auto& [name, dim] : split) {
          const std::size_t i = whole.index(name);
          const Box b = partition_box(specs[i], dim, parts, k);
          // ZeRO: the second of three ranges of the box's flattening.
          const std::int64_t n = b.numel(), lo = zero ? n / 3 : 0, hi = zero ? 2 * n / 3 : n;
          shards[i] = Shard{lo, hi - lo, b};
        }
        ParameterStore p(specs, shards);
        p.initialize(42);
        for (std::size_t i = 0; i < specs.size(); ++i) {
          const auto w = host(whole.value(i));
          const Shard& s = p.shard(i);
          auto want = slice(w, specs[i].shape, s.box);
          want = std::vector<float>(want.begin() + s.offset, want.begin() + s.offset + s.count);
          EXPECT_TRUE(same_bits(want, host(p.value(i))))
              << specs[i].name << " part " << k << " of " << parts << (zero ? " (ZeRO range)" : "");
        }
        EXPECT_FALSE(p.owns_whole(p.index("layers.0.mlp.w1")));
        EXPECT_TRUE(p.owns_whole(p.index("layers.0.mlp.w3")));
      }
    }
  }
}

TEST(ParameterStore, RejectsABoxThatDoesNotFitItsTensor) {
  const auto specs = parameter_specs(tiny());
  auto shards = whole_shards(specs);
  shards[0] = Shard{0, 8, Box{{12, 0}, {8, 8}}};  // rows 12..20 of embed.weight [16, 8]
  try {
    ParameterStore p(specs, shards);
    ADD_FAILURE() << "no error";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'embed.weight'"), std::string::npos) << e.what();
  }
  shards[0] = Shard{60, 8, Box{{8, 0}, {8, 8}}};  // elements 60..68 of a 64-element box
  EXPECT_THROW(ParameterStore(specs, shards), exa::Error);
  shards[0] = Shard{0, 8, Box{{0}, {8}}};  // a 1-d box of a 2-d tensor
  EXPECT_THROW(ParameterStore(specs, shards), exa::Error);
}
