// Several micro-batches in flight (what 1F1B needs): forward m1, forward m2,
// then both backwards in either order give the gradients of the sequential
// forward/backward pairs; contexts are reused, not reallocated; hook lists
// deliver every unit event to each member in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/stage_model.hpp"
#include "model_test_util.hpp"

using namespace exa::model;
using namespace exa::test;

namespace {

struct Batch {
  TokView in, tg;
};

std::vector<Batch> batches(const ModelConfig& cfg, int n) {
  std::vector<Batch> b;
  for (int i = 0; i < n; ++i) {
    auto in = tokens(2, 12, cfg.vocab_size, 40 + i);
    b.push_back({in, shifted(in, cfg.vocab_size, 40 + i)});
  }
  return b;
}

StageModel<float>::Input input(const Batch& b) {
  StageModel<float>::Input in;
  in.tokens = b.in;
  in.targets = b.tg;
  return in;
}

// Worst over tensors of max|a - b| / max|b| (the project's gradient metric).
double worst_relative(const ModelConfig& cfg, const exa::View1<float>& a, const exa::View1<float>& b) {
  const auto ha = host(a), hb = host(b);
  const auto specs = parameter_specs(cfg);
  const auto off = flat_offsets(specs);
  double worst = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    double diff = 0, mag = 0;
    for (std::int64_t k = off[i]; k < off[i] + specs[i].numel(); ++k) {
      diff = std::max(diff, std::fabs(ha[std::size_t(k)] - hb[std::size_t(k)]));
      mag = std::max(mag, std::fabs(hb[std::size_t(k)]));
    }
    worst = std::max(worst, mag > 0 ? diff / mag : diff);
  }
  return worst;
}

enum class Order { Sequential, ReverseBackward, SameBackward };

// Gradient of the mean loss of the micro-batches, processed in `order`.
exa::View1<float> gradient(const ModelConfig& cfg, const exa::View1<float>& values, Order order,
                           std::vector<double>* losses = nullptr, std::size_t* bytes = nullptr) {
  StageModel<float> model(cfg);
  const auto w = bind_flat(cfg, values);
  exa::View1<float> grads("grads", values.extent(0));
  const auto g = bind_flat(cfg, grads);
  const auto mb = batches(cfg, 2);
  const double scale = 0.5;
  auto record = [&](const StageContext<float>& c) {
    if (losses) losses->push_back(c.result.loss.loss);
  };
  for (int round = 0; round < 2; ++round) {  // the second round reuses the pooled contexts
    Kokkos::deep_copy(grads, 0.0f);
    if (losses) losses->clear();
    if (order == Order::Sequential) {
      for (const auto& b : mb) {
        auto& c = model.forward(w, input(b));
        record(c);
        EXPECT_EQ(model.live_contexts(), 1);
        model.backward(c, w, g, scale);
      }
    } else {
      auto& c1 = model.forward(w, input(mb[0]));
      auto& c2 = model.forward(w, input(mb[1]));
      EXPECT_NE(&c1, &c2);
      EXPECT_EQ(model.live_contexts(), 2);
      record(c1);
      record(c2);
      if (order == Order::ReverseBackward) {
        model.backward(c2, w, g, scale);
        model.backward(c1, w, g, scale);
      } else {
        model.backward(c1, w, g, scale);
        model.backward(c2, w, g, scale);
      }
    }
    EXPECT_EQ(model.live_contexts(), 0);
    if (bytes) {
      if (round == 0) *bytes = model.activation_bytes();
      EXPECT_EQ(model.activation_bytes(), *bytes) << "round " << round << " reallocated contexts";
    }
  }
  return grads;
}

}  // namespace

TEST(MicroBatchesInFlight, BothBackwardOrdersMatchSequential) {
  const auto cfg = small();
  const auto values = random_flat<float>(cfg, 77);
  std::vector<double> l_seq, l_rev, l_same;
  std::size_t b_seq = 0, b_rev = 0, b_same = 0;
  const auto g_seq = gradient(cfg, values, Order::Sequential, &l_seq, &b_seq);
  const auto g_rev = gradient(cfg, values, Order::ReverseBackward, &l_rev, &b_rev);
  const auto g_same = gradient(cfg, values, Order::SameBackward, &l_same, &b_same);
  ASSERT_EQ(l_seq.size(), 2u);
  EXPECT_EQ(l_seq, l_rev);  // forwards are deterministic: the same losses bit for bit
  EXPECT_EQ(l_seq, l_same);
  const double rev = worst_relative(cfg, g_rev, g_seq), same = worst_relative(cfg, g_same, g_seq);
  std::printf("in-flight vs sequential gradients: F1 F2 B2 B1 %.3e, F1 F2 B1 B2 %.3e (tolerance 1e-6)\n", rev, same);
  EXPECT_LT(rev, 1e-6);
  EXPECT_LT(same, 1e-6);
  // Two contexts alive take twice one context's activations, no more.
  EXPECT_EQ(b_rev, 2 * b_seq);
  EXPECT_EQ(b_same, 2 * b_seq);
}

TEST(MicroBatchesInFlight, ABackwardNeedsALiveContextOfThisModel) {
  const auto cfg = small();
  const auto values = random_flat<float>(cfg, 5);
  StageModel<float> a(cfg), b(cfg);
  const auto w = bind_flat(cfg, values);
  exa::View1<float> grads("grads", values.extent(0));
  const auto g = bind_flat(cfg, grads);
  const auto mb = batches(cfg, 1);
  auto& c = a.forward(w, input(mb[0]));
  EXPECT_THROW(b.backward(c, w, g), exa::Error);  // another model's context
  a.backward(c, w, g);
  EXPECT_THROW(a.backward(c, w, g), exa::Error);  // consumed
  auto& c2 = a.forward(w, input(mb[0]));
  a.release(c2);
  EXPECT_THROW(a.backward(c2, w, g), exa::Error);  // released
  EXPECT_EQ(a.live_contexts(), 0);
}

namespace {
struct Recorder : UnitHooks {
  std::string tag;
  std::vector<std::string>* log;
  Recorder(std::string t, std::vector<std::string>* l) : tag(std::move(t)), log(l) {}
  void before_forward(int u) override { log->push_back(tag + " F" + std::to_string(u)); }
  void before_backward(int u) override { log->push_back(tag + " B" + std::to_string(u)); }
  void after_backward(int u) override { log->push_back(tag + " A" + std::to_string(u)); }
};
}  // namespace

TEST(MicroBatchesInFlight, HookListsDeliverEveryEventToEachMemberInOrder) {
  const auto cfg = small();  // 2 layers: units 0 (embedding), 1, 2, 3 (head)
  const auto values = random_flat<float>(cfg, 9);
  StageModel<float> model(cfg);
  std::vector<std::string> log;
  Recorder dp("dp", &log), pp("pp", &log);
  model.add_hooks(&dp);
  model.add_hooks(&pp);
  const auto w = bind_flat(cfg, values);
  exa::View1<float> grads("grads", values.extent(0));
  const auto g = bind_flat(cfg, grads);
  const auto mb = batches(cfg, 1);
  auto& c = model.forward(w, input(mb[0]));
  model.backward(c, w, g);
  std::vector<std::string> want;
  for (int u = 0; u <= 3; ++u)
    for (const char* t : {"dp", "pp"}) want.push_back(std::string(t) + " F" + std::to_string(u));
  for (int u = 3; u >= 0; --u) {
    for (const char* t : {"dp", "pp"}) want.push_back(std::string(t) + " B" + std::to_string(u));
    for (const char* t : {"dp", "pp"}) want.push_back(std::string(t) + " A" + std::to_string(u));
  }
  EXPECT_EQ(log, want);
}

namespace {
// The routing events of a forward: which unit, and the experts marked.
struct RoutingRecorder : UnitHooks {
  std::vector<std::string> log;
  static std::string bits(const std::vector<std::uint8_t>& used) {
    std::string s;
    for (auto u : used) s += u ? '1' : '0';
    return s;
  }
  void before_forward(int u) override { log.push_back("F" + std::to_string(u)); }
  void experts_routed(int u, const std::vector<std::uint8_t>& used) override {
    log.push_back("R" + std::to_string(u) + ":" + bits(used));
  }
  void after_forward(int u, const std::vector<std::uint8_t>& used) override {
    log.push_back("A" + std::to_string(u) + ":" + bits(used));
  }
};
}  // namespace

// experts_routed (what a CUDA build's expert offload prefetches on) comes
// inside the MoE layer's forward, between its start and its end, with the
// experts the layer then reports as used; a dense layer has none.
TEST(MicroBatchesInFlight, ExpertsRoutedComesInsideTheMoeLayerWithItsUsedExperts) {
  const auto cfg = small();  // layer 0 dense (unit 1), layer 1 MoE (unit 2)
  const auto values = random_flat<float>(cfg, 9);
  StageModel<float> model(cfg);
  RoutingRecorder rec;
  model.add_hooks(&rec);
  const auto w = bind_flat(cfg, values);
  const auto mb = batches(cfg, 1);
  auto& c = model.forward(w, input(mb[0]));
  model.release(c);
  std::string used;
  for (const auto& e : rec.log)
    if (e.rfind("A2:", 0) == 0) used = e.substr(3);
  ASSERT_EQ(used.size(), std::size_t(cfg.n_experts));
  EXPECT_NE(used, std::string(std::size_t(cfg.n_experts), '0'));
  const std::vector<std::string> want = {"F0", "F1", "A1:", "F2", "R2:" + used, "A2:" + used, "F3"};
  EXPECT_EQ(rec.log, want);
}

// Under full recompute every MoE layer's backward runs its forward again in
// one shared context: the routing is not news then (before_backward brought
// the experts in), so experts_routed comes only from the forward, each time
// with its own layer's unit.
TEST(MicroBatchesInFlight, ARecomputedForwardDoesNotReportRoutingAgain) {
  auto cfg = small();
  cfg.moe_every = 1;  // both layers MoE: units 1 and 2
  const auto values = random_flat<float>(cfg, 9);
  ModelOptions opt;
  opt.recompute = Recompute::full;
  StageModel<float> model(cfg, opt);
  RoutingRecorder rec;
  model.add_hooks(&rec);
  const auto w = bind_flat(cfg, values);
  exa::View1<float> grads("grads", values.extent(0));
  const auto g = bind_flat(cfg, grads);
  const auto mb = batches(cfg, 1);
  auto& c = model.forward(w, input(mb[0]));
  const std::size_t after_forward = rec.log.size();
  model.backward(c, w, g);
  std::vector<std::string> routed;
  for (std::size_t i = 0; i < rec.log.size(); ++i)
    if (rec.log[i][0] == 'R') routed.push_back(rec.log[i].substr(0, 2) + (i < after_forward ? " forward" : " backward"));
  EXPECT_EQ(routed, (std::vector<std::string>{"R1 forward", "R2 forward"}));
}
