// Expert-load metrics (parallel/expert/moe_load.hpp): accumulation over micro-batches,
// the sum over ranks, the EP-rank view and both renderings. Run at 1 and 2
// ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "core/error.hpp"
#include "model/router_bias.hpp"
#include "parallel/expert/moe_load.hpp"

using exa::model::LayerRouting;
using namespace exa::parallel::expert;

namespace {

LayerRouting routing(std::int64_t layer, std::vector<std::int64_t> routed, std::vector<std::int64_t> kept,
                     std::int64_t dropped) {
  LayerRouting r;
  r.layer = layer;
  r.routed = std::move(routed);
  r.kept = std::move(kept);
  r.dropped = dropped;
  return r;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace

TEST(MoeLoad, SumsMicroBatchesPerLayer) {
  MoeLoad load;
  EXPECT_TRUE(load.empty());
  load.add({routing(1, {4, 0, 2, 2}, {3, 0, 2, 2}, 1), routing(3, {2, 2, 2, 2}, {2, 2, 2, 2}, 0)});
  load.add({routing(1, {0, 4, 2, 2}, {0, 3, 2, 2}, 1), routing(3, {8, 0, 0, 0}, {4, 0, 0, 0}, 4)});
  ASSERT_EQ(load.layers().size(), 2u);
  const auto& a = load.layers()[0];
  EXPECT_EQ(a.layer, 1);
  EXPECT_EQ(a.routed, (std::vector<std::int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(a.kept, (std::vector<std::int64_t>{3, 3, 4, 4}));
  EXPECT_EQ(a.dropped, 2);
  const auto& b = load.layers()[1];
  EXPECT_EQ(b.routed, (std::vector<std::int64_t>{10, 2, 2, 2}));
  EXPECT_EQ(b.kept, (std::vector<std::int64_t>{6, 2, 2, 2}));
  EXPECT_EQ(b.dropped, 4);
  EXPECT_EQ(&load.worst(), &b);
  // A micro-batch with other layers is a programming error, said so.
  EXPECT_THROW(load.add({routing(1, {1, 1, 1, 1}, {1, 1, 1, 1}, 0)}), exa::Error);
  EXPECT_THROW(load.add({routing(1, {1, 1, 1, 1}, {1, 1, 1, 1}, 0), routing(2, {1, 1, 1, 1}, {1, 1, 1, 1}, 0)}),
               exa::Error);
}

TEST(MoeLoad, RankTokensSumKeptOverEachRanksExperts) {
  LayerLoad l;
  l.kept = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(l.rank_tokens(1), (std::vector<std::int64_t>{21}));
  EXPECT_EQ(l.rank_tokens(2), (std::vector<std::int64_t>{6, 15}));
  EXPECT_EQ(l.rank_tokens(3), (std::vector<std::int64_t>{3, 7, 11}));
  EXPECT_THROW(l.rank_tokens(4), exa::Error);
  EXPECT_DOUBLE_EQ(max_over_mean({4, 0, 0, 0}), 4.0);
  EXPECT_DOUBLE_EQ(max_over_mean({3, 1}), 1.5);
  EXPECT_DOUBLE_EQ(max_over_mean({0, 0}), 1.0);
}

TEST(MoeLoad, SummaryNamesTheWorstLayer) {
  MoeLoad load;
  EXPECT_EQ(moe_summary(load, 1), "");
  EXPECT_TRUE(moe_json(load, 1).is_null());
  load.add({routing(1, {2, 2, 2, 2}, {2, 2, 2, 2}, 0), routing(3, {8, 0, 0, 0}, {6, 0, 0, 0}, 2)});
  EXPECT_EQ(moe_summary(load, 2), "moe L3 exp 4.00 rank 2.00 drop 2");
  EXPECT_EQ(moe_summary(load, 4), "moe L3 exp 4.00 rank 4.00 drop 2");
}

TEST(MoeLoad, JsonHoldsEveryLayer) {
  MoeLoad load;
  load.add({routing(0, {5, 1, 1, 1}, {4, 1, 1, 1}, 1), routing(1, {2, 2, 2, 2}, {2, 2, 2, 2}, 0)});
  const auto j = moe_json(load, 2);
  EXPECT_EQ(j.at("ep"), 2);
  EXPECT_EQ(j.at("worst_layer"), 0);
  ASSERT_EQ(j.at("layers").size(), 2u);
  const auto& l = j.at("layers")[0];
  EXPECT_EQ(l.at("layer"), 0);
  EXPECT_EQ(l.at("routed"), (std::vector<std::int64_t>{5, 1, 1, 1}));
  EXPECT_EQ(l.at("kept"), (std::vector<std::int64_t>{4, 1, 1, 1}));
  EXPECT_EQ(l.at("dropped"), 1);
  EXPECT_EQ(l.at("rank_tokens"), (std::vector<std::int64_t>{5, 2}));
  EXPECT_EQ(l.at("expert_max"), 5);
  EXPECT_DOUBLE_EQ(l.at("expert_mean").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(l.at("expert_imbalance").get<double>(), 2.5);
  EXPECT_EQ(l.at("rank_max"), 5);
  EXPECT_DOUBLE_EQ(l.at("rank_mean").get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(l.at("rank_imbalance").get<double>(), 5.0 / 3.5);
  EXPECT_FALSE(l.contains("router_bias"));

  exa::model::ModelConfig cfg;
  cfg.n_layers = 2;
  cfg.n_experts = 4;
  exa::model::RouterBias bias(cfg);
  bias.update(0, {5, 1, 1, 1}, 0.5);
  const auto jb = moe_json(load, 2, &bias);
  EXPECT_EQ(jb.at("layers")[0].at("router_bias"), (std::vector<float>{-0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(jb.at("layers")[1].at("router_bias"), (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
}

// Rank r contributes (r + 1) times the same counts: the sum over P ranks is
// P (P + 1) / 2 times them, on every rank.
TEST(MoeLoad, SumOverRanksIsTheSameEverywhere) {
  const std::int64_t k = world_rank() + 1, P = world_size(), f = P * (P + 1) / 2;
  MoeLoad load;
  load.add({routing(1, {3 * k, k, 0, 0}, {2 * k, k, 0, 0}, k)});
  load.sum_over(MPI_COMM_WORLD);
  const auto& l = load.layers()[0];
  EXPECT_EQ(l.routed, (std::vector<std::int64_t>{3 * f, f, 0, 0}));
  EXPECT_EQ(l.kept, (std::vector<std::int64_t>{2 * f, f, 0, 0}));
  EXPECT_EQ(l.dropped, f);
  MoeLoad none;
  none.sum_over(MPI_COMM_WORLD);  // no MoE layers: nothing to send
  EXPECT_TRUE(none.empty());
}
