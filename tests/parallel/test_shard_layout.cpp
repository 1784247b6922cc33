#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/unit_hooks.hpp"
#include "parallel/data/shard_layout.hpp"

using exa::parallel::data::ShardLayout;
using exa::parallel::data::Unit;

namespace {

exa::model::ModelConfig config(bool tied) {
  exa::model::ModelConfig c;
  c.vocab_size = 61;  // odd sizes: units do not divide evenly
  c.d_model = 12;
  c.n_layers = 3;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 20;
  c.n_experts = 3;
  c.top_k = 2;
  c.d_expert = 7;
  c.moe_every = 2;  // layers 1 MoE, 0 and 2 dense
  c.n_shared_experts = 1;
  c.tie_embeddings = tied;
  return c;
}

}  // namespace

TEST(UnitOf, NamesMapToUnits) {
  EXPECT_EQ(exa::model::unit_of("embed.weight", 3), 0);
  EXPECT_EQ(exa::model::unit_of("layers.0.attn.wq.weight", 3), 1);
  EXPECT_EQ(exa::model::unit_of("layers.2.moe.experts.w1", 3), 3);
  EXPECT_EQ(exa::model::unit_of("norm.weight", 3), 4);
  EXPECT_EQ(exa::model::unit_of("lm_head.weight", 3), 4);
  EXPECT_THROW(exa::model::unit_of("layers.3.attn.wq.weight", 3), exa::Error);
  EXPECT_THROW(exa::model::unit_of("layers.x.attn", 3), exa::Error);
  EXPECT_THROW(exa::model::unit_of("bias", 3), exa::Error);
}

// Over all parts, every element of every tensor is owned exactly once, each
// part's shards are its unit block in order, and the local buffer is the
// units' parts back to back.
TEST(ShardLayout, PartsCoverEveryTensorOnce) {
  for (bool tied : {false, true}) {
    const auto cfg = config(tied);
    const auto specs = exa::model::parameter_specs(cfg);
    for (int parts : {1, 2, 3, 4, 7, 64}) {
      std::vector<std::vector<int>> owned(specs.size());
      for (std::size_t i = 0; i < specs.size(); ++i) owned[i].assign(std::size_t(specs[i].numel()), 0);
      std::int64_t padded_total = -1;
      for (int k = 0; k < parts; ++k) {
        const ShardLayout L(specs, cfg.n_layers, parts, k);
        ASSERT_EQ(L.size(), exa::model::n_units(cfg.n_layers));
        if (padded_total < 0) padded_total = L.padded_total();
        EXPECT_EQ(L.padded_total(), padded_total);  // the same on every part
        const auto shards = L.shards();
        std::int64_t local = 0;
        for (int u = 0; u < L.size(); ++u) {
          const Unit& un = L.unit(u);
          EXPECT_EQ(un.padded, un.block * parts);
          EXPECT_GE(un.padded, un.numel);
          EXPECT_LT(un.padded - un.numel, parts);
          EXPECT_EQ(un.local_offset, local);
          std::int64_t in_unit = 0;
          for (std::size_t i = un.first_spec; i < un.end_spec; ++i) {
            EXPECT_EQ(L.unit_of_spec(i), u);
            for (std::int64_t e = 0; e < shards[i].count; ++e) owned[i][std::size_t(shards[i].offset + e)]++;
            if (shards[i].count > 0)  // contiguous with the block's start within the unit
              EXPECT_EQ(L.offset_in_unit(i) + shards[i].offset, un.block * k + in_unit);
            in_unit += shards[i].count;
          }
          EXPECT_EQ(in_unit, un.local_count);
          local += un.local_count;
        }
      }
      for (std::size_t i = 0; i < specs.size(); ++i)
        for (int c : owned[i]) ASSERT_EQ(c, 1) << specs[i].name << " parts " << parts << " tied " << tied;
    }
  }
}

TEST(ShardLayout, RejectsMissingPart) {
  const auto cfg = config(false);
  const auto specs = exa::model::parameter_specs(cfg);
  EXPECT_THROW(ShardLayout(specs, cfg.n_layers, 2, 2), exa::Error);
  EXPECT_THROW(ShardLayout(specs, cfg.n_layers, 0, 0), exa::Error);
}

// Each unit knows how many of its elements reduce over which group: the MoE
// layer's routed experts over the expert-data group, everything else over
// the data group.
TEST(ShardLayout, RecordsEachUnitsReductionGroups) {
  using exa::model::ReduceGroup;
  const auto cfg = config(false);
  const auto specs = exa::model::parameter_specs(cfg);
  const ShardLayout L(specs, cfg.n_layers, 2, 0);
  for (int u = 0; u < L.size(); ++u) {
    const Unit& un = L.unit(u);
    std::int64_t experts = 0;
    for (std::size_t i = un.first_spec; i < un.end_spec; ++i) {
      const bool routed = specs[i].name.find(".moe.experts.") != std::string::npos;
      EXPECT_EQ(L.reduce_of_spec(i), routed ? ReduceGroup::ExpertData : ReduceGroup::Data) << specs[i].name;
      if (routed) experts += specs[i].numel();
    }
    EXPECT_EQ(un.numel_of(ReduceGroup::ExpertData), experts) << "unit " << u;
    EXPECT_EQ(un.numel_of(ReduceGroup::Data), un.numel - experts) << "unit " << u;
    EXPECT_EQ(un.numel_of(ReduceGroup::None), 0);
  }
  // Layer 1 (unit 2) is the MoE layer: both groups.
  EXPECT_GT(L.unit(2).numel_of(ReduceGroup::ExpertData), 0);
  EXPECT_GT(L.unit(2).numel_of(ReduceGroup::Data), 0);
  EXPECT_EQ(L.unit(1).numel_of(ReduceGroup::ExpertData), 0);
}

// ZeRO on top of tensor-parallel boxes: the parts split each unit's boxes
// (not the whole tensors), every element of every box is owned once, and
// each shard carries its box.
TEST(ShardLayout, PartsSplitTheBoxesOfTheTensors) {
  const auto cfg = config(false);
  const auto specs = exa::model::parameter_specs(cfg);
  std::vector<exa::model::Box> boxes;
  for (const auto& s : specs) {
    // The second of three parts along a dimension divisible by 3, else whole.
    int dim = -1;
    for (std::size_t d = 0; d < s.shape.size(); ++d)
      if (s.shape[d] % 3 == 0) dim = static_cast<int>(d);
    boxes.push_back(dim < 0 ? exa::model::whole_box(s.shape) : exa::model::partition_box(s, dim, 3, 1));
  }
  for (int parts : {1, 2, 5}) {
    std::vector<std::vector<int>> owned(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) owned[i].assign(std::size_t(boxes[i].numel()), 0);
    for (int k = 0; k < parts; ++k) {
      const ShardLayout L(specs, boxes, cfg.n_layers, parts, k);
      const auto shards = L.shards();
      std::int64_t total = 0;
      for (std::size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(shards[i].box, boxes[i]) << specs[i].name;
        for (std::int64_t e = 0; e < shards[i].count; ++e) owned[i][std::size_t(shards[i].offset + e)]++;
        total += boxes[i].numel();
      }
      EXPECT_EQ(L.numel(), total);
    }
    for (std::size_t i = 0; i < specs.size(); ++i)
      for (int c : owned[i]) ASSERT_EQ(c, 1) << specs[i].name << " parts " << parts;
  }
  auto bad = boxes;
  bad[0].extent[0] += 1000;
  EXPECT_THROW(ShardLayout(specs, bad, cfg.n_layers, 2, 0), exa::Error);
}
