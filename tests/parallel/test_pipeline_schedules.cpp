// Pipeline schedules and the stage split (parallel/pipeline): every
// schedule runs each micro-batch's forward before its backward; the
// contexts alive at once are m under GPipe and at most pp - stage under
// 1F1B (the memory claim of the 1F1B schedule); the balanced split gives
// every stage a layer and moves layers off the stages that also hold the
// embedding and the head when those are heavy; explicit counts are checked.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "core/error.hpp"
#include "parallel/pipeline/schedules.hpp"
#include "parallel/pipeline/stage_split.hpp"

using namespace exa::parallel;
using namespace exa::parallel::pipeline;

TEST(PipelineSchedules, PeakContextsGPipeVersusOneFOneB) {
  for (int pp : {2, 4}) {
    for (int m : {1, 2, 4, 8}) {
      for (int s = 0; s < pp; ++s) {
        const auto g = make_schedule("gpipe", s, pp);
        EXPECT_EQ(check_schedule(g->ops(m), m, g->name()), m) << "gpipe pp " << pp << " m " << m << " stage " << s;
        const auto f = make_schedule("1f1b", s, pp);
        const int peak = check_schedule(f->ops(m), m, f->name());
        EXPECT_EQ(peak, std::min(pp - s, m)) << "1f1b pp " << pp << " m " << m << " stage " << s;
        EXPECT_LE(peak, pp - s);
        const auto z = make_schedule("zb", s, pp);  // 1f1b's order and memory, W deferred
        EXPECT_EQ(check_schedule(z->ops(m), m, z->name()), peak);
      }
    }
  }
}

TEST(PipelineSchedules, OneFOneBOrder) {
  // pp = 4, stage 1, m = 4: two warm-up forwards, then F B pairs, then the rest.
  const auto f = make_schedule("1f1b", 1, 4);
  std::string t;
  for (const auto& op : f->ops(4)) t += (op.kind == MicroBatchOp::Kind::Forward ? "F" : "B") + std::to_string(op.micro);
  EXPECT_EQ(t, "F0F1F2B0F3B1B2B3");
}

TEST(PipelineSchedules, UnknownNameIsRefused) {
  try {
    make_schedule("zigzag", 0, 2);
    FAIL() << "no error";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"gpipe\", \"1f1b\" or \"zb\""), std::string::npos) << e.what();
  }
  EXPECT_DOUBLE_EQ(theoretical_bubble("1f1b", 4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble("zb", 4, 8), 3.0 / 27.0);
}

TEST(StageSplit, BalancedCoversTheLayers) {
  exa::model::ModelConfig cfg;
  cfg.n_layers = 8;
  cfg.vocab_size = 256;
  for (int pp : {1, 2, 4, 8}) {
    const auto c = balanced_layers(cfg, pp);
    ASSERT_EQ(int(c.size()), pp);
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), std::int64_t(0)), 8);
    for (const auto n : c) EXPECT_GE(n, 1);
  }
  // A uniform model whose embedding and head are light splits evenly.
  EXPECT_EQ(balanced_layers(cfg, 2), (std::vector<std::int64_t>{4, 4}));
  // A vocabulary as heavy as several layers pushes layers to the inner stages.
  cfg.vocab_size = 32768;
  const auto c = balanced_layers(cfg, 4);
  EXPECT_LT(c.front(), c[1]);
  EXPECT_LT(c.back(), c[2]);
}

TEST(StageSplit, ExplicitCountsAreChecked) {
  EXPECT_EQ(parse_layers_per_stage("3, 1", 4, 2, "deck.toml:3:"), (std::vector<std::int64_t>{3, 1}));
  EXPECT_TRUE(parse_layers_per_stage("auto", 4, 2, "deck.toml:3:").empty());
  for (const char* bad : {"3,2", "4", "2,x", "0,4", "1,1,2"}) {
    try {
      parse_layers_per_stage(bad, 4, 2, "deck.toml:3:");
      FAIL() << bad << ": no error";
    } catch (const exa::Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("deck.toml:3: pipeline.layers_per_stage", 0), 0u) << m;
    }
  }
}

#include "model/seams/local_linear.hpp"
#include "parallel/pipeline/deferred_weights.hpp"

// The zero-bubble split: a weight gradient recorded while the queue defers
// and run later equals the immediate one, although the scratch its dy came
// from has been overwritten in between; nothing runs until asked.
TEST(DeferredWeights, RecordedGradientEqualsImmediate) {
  using Q = WeightGradQueue;
  auto inner = std::make_shared<const exa::model::LocalLinear<float>>();
  auto queue = std::make_shared<Q>();
  const DeferredLinear lin(inner, queue);
  const int N = 5, in = 3, out = 4;
  Q::Act x("x", N, in), dy("dy", N, out);
  Kokkos::View<float**, exa::Layout, exa::Device> g1("g1", out, in), g2("g2", out, in);
  auto hx = Kokkos::create_mirror_view(x);
  auto hdy = Kokkos::create_mirror_view(dy);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < in; ++i) hx(n, i) = float(0.1 * (n + 1) - 0.05 * i);
    for (int o = 0; o < out; ++o) hdy(n, o) = float(0.3 * o - 0.02 * n * n);
  }
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(dy, hdy);
  const Q::Wt w1(g1.data(), out, in), w2(g2.data(), out, in);
  lin.backward_weight(x, dy, w1, true);  // not deferring: immediate
  queue->open(0);
  lin.backward_weight(x, dy, w2, true);
  queue->close();
  EXPECT_EQ(queue->pending(), 1u);
  EXPECT_GT(queue->bytes(), 0u);
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g2);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) EXPECT_EQ(h2(o, i), 0.0f) << "ran before it was asked";
  Kokkos::deep_copy(dy, 7.0f);  // the scratch is reused by the next layer
  queue->run_all();
  EXPECT_TRUE(queue->empty());
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g1);
  h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g2);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) EXPECT_FLOAT_EQ(h2(o, i), h1(o, i));
}

// An input buffer written again between two recorded products (selective
// recomputation's shared norm output feeds the FFN's w1 and then, with
// other values, the attention's wq) gets a copy of its own each time: the
// later product must not read the earlier one's copy.
TEST(DeferredWeights, ABufferWrittenAgainIsCopiedAgain) {
  using Q = WeightGradQueue;
  auto inner = std::make_shared<const exa::model::LocalLinear<float>>();
  auto queue = std::make_shared<Q>();
  const DeferredLinear lin(inner, queue);
  const int N = 4, in = 3, out = 2;
  Q::Act x("x", N, in), other("other", N, in), dy("dy", N, out);
  Kokkos::deep_copy(dy, 1.0f);
  Kokkos::View<float**, exa::Layout, exa::Device> g1("g1", out, in), g2("g2", out, in), g3("g3", out, in);
  const Q::Wt w1(g1.data(), out, in), w2(g2.data(), out, in), w3(g3.data(), out, in);
  queue->open(0);
  Kokkos::deep_copy(x, 1.0f);
  lin.backward_weight(x, dy, w1, true);
  lin.backward_weight(other, dy, w2, true);  // another input in between
  Kokkos::deep_copy(x, 2.0f);                // the same buffer, new values
  lin.backward_weight(x, dy, w3, true);
  queue->close();
  queue->run_all();
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g1);
  auto h3 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g3);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      EXPECT_FLOAT_EQ(h1(o, i), float(N) * 1.0f);
      EXPECT_FLOAT_EQ(h3(o, i), float(N) * 2.0f);
    }
}
