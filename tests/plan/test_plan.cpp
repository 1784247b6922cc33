// The planner's arithmetic (docs/planner.md): FLOPs per token against the
// model's own count, the analytic ZeRO cut against ShardLayout, the
// pipeline timeline against the schedules' theory, the search's plans
// against the deck's checks, and the cluster file's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "parallel/data/data_parallel.hpp"
#include "parallel/data/shard_layout.hpp"
#include "parallel/pipeline/schedules.hpp"
#include "model/parameter_specs.hpp"
#include "plan/cluster.hpp"
#include "plan/cost_model.hpp"
#include "plan/memory_model.hpp"
#include "plan/reliability.hpp"
#include "plan/search.hpp"
#include "plan/timeline.hpp"
#include "train/flops.hpp"

namespace {

using namespace exa;

model::ModelConfig moe_model() {
  model::ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 96;
  c.seq_len = 32;
  c.n_experts = 8;
  c.top_k = 2;
  c.d_expert = 48;
  return c;
}

// One node of 4 devices at 0.1 TFLOP/s, 8 GiB and 10 GB/s, its links 10
// GB/s at 1 us.
plan::Cluster small_cluster() {
  plan::Cluster c;
  c.nodes = 1;
  c.devices_per_node = 4;
  c.fp32_tflops = 0.1;
  c.memory_gib = 8;
  c.memory_bandwidth_gbs = 10;
  c.intra = {10, 1};
  c.inter = c.intra;
  return c;
}

TEST(Plan, FlopsPerTokenEqualTheModelsCount) {
  auto c = moe_model();
  for (int variant = 0; variant < 4; ++variant) {
    if (variant == 1) c.moe_every = 2;
    if (variant == 2) c.n_shared_experts = 2;
    if (variant == 3) c.moe_every = 0;
    EXPECT_EQ(plan::flops_per_token(c).total(), train::count_flops(c).per_token_train) << "variant " << variant;
  }
}

// LoRA: the frozen matrices count forward and input gradient only, the
// adapters all three products, as the run counts them.
TEST(Plan, LoraFlopsEqualTheModelsCount) {
  auto c = moe_model();
  c.lora.rank = 4;
  c.lora.targets.attention = c.lora.targets.experts = c.lora.targets.router = true;
  EXPECT_DOUBLE_EQ(plan::flops_per_token(c).total(), train::count_flops(c).per_token_train);
  EXPECT_GT(plan::flops_per_token(c).adapters, 0.0);
}

// LoRA fine-tuning on a data-parallel layout: the gradients reduced and
// the optimizer state are the adapters' only, the weight gradients of the
// frozen model are not computed, and the parameters stay the model's.
TEST(Plan, LoraReducesAndUpdatesOnlyTheAdapters) {
  auto full = moe_model();
  auto lora = full;
  lora.lora.rank = 4;
  lora.lora.targets.attention = lora.lora.targets.experts = true;
  plan::Candidate c;
  c.grid = comm::GridSizes{4, 1, 1, 4, 1, 1, 0, 0};
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.zero = 1;
  plan::Cluster cl = small_cluster();
  cl.intra = cl.inter = {0.1, 10};  // a slow link, so the gradient reduction shows
  const auto a = plan::predict(full, c, cl), b = plan::predict(lora, c, cl);
  EXPECT_LT(b.dp, a.dp);
  EXPECT_LT(b.compute, a.compute);
  EXPECT_LT(b.optimizer, a.optimizer);
  EXPECT_LT(b.memory.optimizer, 0.2 * a.memory.optimizer);
  EXPECT_LT(b.memory.gradients, a.memory.gradients);
  EXPECT_GE(b.memory.parameters, a.memory.parameters);  // the model, plus its adapters
  // Exactly the run's engines: the optimizer holds the trainable tensors.
  double adapters = 0;
  for (const auto& s : model::parameter_specs(lora))
    if (s.trainable) adapters += double(s.numel());
  const auto st = plan::state_bytes(lora, model::StagePlan::whole(lora), 0, 1, 1);
  EXPECT_EQ(st.optimizer, 8 * adapters);
  EXPECT_EQ(st.gradients, 4 * adapters);
}

TEST(Plan, ZeroCutEqualsTheShardLayout) {
  auto c = moe_model();
  c.tie_embeddings = true;
  const auto plan = model::StagePlan::whole(c);
  for (int parts : {1, 2, 3, 8}) {
    const auto groups = parallel::data::engine_specs(c, plan);
    ASSERT_EQ(groups.size(), 1u);
    const parallel::data::ShardLayout L(groups[0], c.n_layers, parts, 0);
    const auto m = plan::state_bytes(c, plan, 3, parts, parts);
    EXPECT_EQ(m.optimizer, 8.0 * double(L.local_numel())) << parts << " parts";
    std::int64_t alt = 0;
    for (int u = 1; u < L.size(); ++u) alt = std::max(alt, L.unit(u).padded);
    EXPECT_EQ(m.parameters, 4.0 * double(L.local_numel() + 2 * alt + L.unit(0).padded)) << parts << " parts";
  }
}

TEST(Plan, PipelineBubbleMatchesTheSchedulesTheory) {
  for (int pp : {2, 4}) {
    for (int m : {4, 8, 16}) {
      std::vector<plan::OpTimes> t(static_cast<std::size_t>(pp), plan::OpTimes{1.0, 1.0, 0.0, 0.0});
      for (const char* s : {"gpipe", "1f1b"}) {
        const auto tl = plan::simulate_pipeline(s, t, m);
        EXPECT_NEAR(tl.bubble, parallel::pipeline::theoretical_bubble(s, pp, m), 1e-12) << s << " pp " << pp << " m " << m;
        EXPECT_NEAR(tl.span, 2.0 * (m + pp - 1), 1e-12);
      }
      // zb: B split into an input part and a deferred weight part, each
      // half the backward. The executor runs every W still waiting before
      // the step's last backward (parallel/pipeline/deferred_weights.hpp),
      // so the cool-down gain of ZB-H1 is not there: never worse than
      // 1f1b, the same busy time.
      std::vector<plan::OpTimes> z(static_cast<std::size_t>(pp), plan::OpTimes{1.0, 0.5, 0.5, 0.0});
      const auto zb = plan::simulate_pipeline("zb", z, m), ob = plan::simulate_pipeline("1f1b", t, m);
      EXPECT_LE(zb.span, ob.span);
      EXPECT_NEAR(zb.busy, ob.busy, 1e-12);
      // W at fixed points (ZeRO 2/3): every W still runs, and no later
      // than the step's last backward.
      const auto fixed = plan::simulate_pipeline("zb", z, m, 1, true);
      EXPECT_LE(fixed.span, ob.span);
      EXPECT_NEAR(fixed.busy, ob.busy, 1e-12);
      if (m % pp == 0) {
        std::vector<plan::OpTimes> half(static_cast<std::size_t>(pp), plan::OpTimes{0.5, 0.5, 0.0, 0.0});
        const auto il = plan::simulate_pipeline("interleaved", half, m, 2);
        EXPECT_NEAR(il.busy, 2.0 * m, 1e-12);
        EXPECT_LT(il.span, 2.0 * (m + pp - 1));
      }
    }
  }
  // Where stages differ and sends take time, running W before each
  // receive instead of in the waits costs a little (pp 4, 8 micro-batches,
  // stage 0 twice as fast: 23.2 against 23.0).
  std::vector<plan::OpTimes> uneven(4, plan::OpTimes{1.0, 0.5, 0.5, 0.3});
  uneven[0] = plan::OpTimes{0.5, 0.25, 0.25, 0.3};
  EXPECT_GT(plan::simulate_pipeline("zb", uneven, 8, 1, true).span, plan::simulate_pipeline("zb", uneven, 8).span);
  // One stage: no bubble, the sum of the operations.
  const auto one = plan::simulate_pipeline("1f1b", {plan::OpTimes{1.0, 2.0, 0.0, 0.0}}, 5);
  EXPECT_DOUBLE_EQ(one.span, 15.0);
  EXPECT_DOUBLE_EQ(one.bubble, 0.0);
}

TEST(Plan, GradientProjectionReducesOncePerTaskAndLshAttendsToItsSpan) {
  // PCGrad over K tasks: K reductions of the gradient under ZeRO 0/1 (each
  // overlapping only its round's last backward) and the projections'
  // passes; none of it without projection.
  const auto cfg = moe_model();
  plan::Candidate c;
  c.grid = comm::GridSizes{4, 1, 1, 4, 1, 1, 0, 0};
  c.micro_batch = 2;
  c.grad_accum = 4;
  plan::Cluster cl = small_cluster();
  cl.intra = cl.inter = {0.1, 10};  // a slow link, so the reductions show
  auto pc = c;
  pc.projection_tasks = 2;
  const auto a = plan::predict(cfg, c, cl), b = plan::predict(cfg, pc, cl);
  EXPECT_GT(a.dp, 0.0);
  EXPECT_NEAR(b.dp, 2 * a.dp, 1e-9 * a.dp);
  EXPECT_GT(b.optimizer, a.optimizer);
  // LSH attention's core FLOPs follow its span, not the sequence.
  auto lsh = moe_model();
  lsh.seq_len = 4096;
  auto full = lsh;
  lsh.attention = {true, 2, 64, 1};
  EXPECT_EQ(lsh.attention_span(), 2.0 * 2 * 64);
  EXPECT_LT(plan::flops_per_token(lsh).attn_core, 0.1 * plan::flops_per_token(full).attn_core);
}

TEST(Plan, LinksMatter) {
  // The same layout predicts a longer step on a slower link.
  const auto cfg = moe_model();
  plan::Candidate c;
  c.grid = comm::GridSizes{4, 1, 1, 4, 1, 4, 0, 0};
  c.micro_batch = 2;
  c.grad_accum = 2;
  const plan::Cluster fast = small_cluster();
  plan::Cluster slow = fast;
  slow.intra = {0.01, 100};
  const auto a = plan::predict(cfg, c, fast), b = plan::predict(cfg, c, slow);
  EXPECT_GT(b.step, a.step);
  EXPECT_GT(b.a2a, a.a2a);
  EXPECT_EQ(b.memory.parameters, a.memory.parameters);
}

// Two nodes of 4 devices: a fast node-local link and a slow inter-node
// one, compute and memory so fast that nothing hides the collectives.
plan::Cluster two_nodes() {
  plan::Cluster c = small_cluster();
  c.nodes = 2;
  c.fp32_tflops = 1e6;
  c.memory_bandwidth_gbs = 1e9;
  c.memory_gib = 64;
  c.intra = {100, 1};
  c.inter = {1, 10};
  return c;
}

// Ring collectives' times as docs/planner.md states them: per-rank bytes
// over the link, a latency per message.
double ring_half(double bytes, int p, const plan::Link& l) {
  return p <= 1 ? 0 : (p - 1) * l.latency_us * 1e-6 + double(p - 1) / p * bytes / (l.bandwidth_gbs * 1e9);
}
double ring_allreduce(double bytes, int p, const plan::Link& l) {
  return p <= 1 ? 0 : 2 * (p - 1) * l.latency_us * 1e-6 + 2.0 * (p - 1) / p * bytes / (l.bandwidth_gbs * 1e9);
}

TEST(Plan, HierarchicalCollectivesCrossNodesWithTheirShare) {
  // dp 8 over 2 nodes of 4. Flat: the ring over the inter-node link.
  // Hierarchical (parallel.hierarchical): a node-local reduce-scatter, the
  // inter-node allreduce of this rank's quarter, a node-local allgather;
  // with comm.compress_scope = "inter_node" only that middle stage is
  // encoded. ep 1: the experts reduce with the rest.
  const auto cfg = moe_model();
  const auto cl = two_nodes();
  plan::Candidate c;
  c.grid = comm::GridSizes{8, 1, 1, 8, 1, 1, 0, 0};
  c.micro_batch = 1;
  c.grad_accum = 1;
  const double E = plan::stage_elements(cfg, model::StagePlan::whole(cfg)).trainable.total();
  const double tol = 1e-6;
  const auto flat = plan::predict(cfg, c, cl);
  EXPECT_NEAR(flat.dp, ring_allreduce(4 * E, 8, cl.inter), tol * flat.dp);
  auto h = c;
  h.hierarchical = true;
  const auto hier = plan::predict(cfg, h, cl);
  const double local = 2 * ring_half(4 * E, 4, cl.intra);
  EXPECT_NEAR(hier.dp, local + ring_allreduce(4 * E / 4, 2, cl.inter), tol * hier.dp);
  EXPECT_LT(hier.dp, 0.5 * flat.dp);
  auto q = h;
  q.compression = "int8";
  q.compress_scope = "inter_node";
  const double w = plan::wire_bytes("int8", 256);
  EXPECT_NEAR(plan::predict(cfg, q, cl).dp, local + ring_allreduce(w * E / 4, 2, cl.inter), tol * hier.dp);
  // ZeRO 1: the reduce-scatter's two stages, then the weights' gathers
  // (inter-node first, into this rank's run), encoded on both stages
  // under "all" and on the inter-node one under "inter_node".
  auto z = h;
  z.zero = 1;
  z.weight_compression = "bf16";
  const double wb = plan::wire_bytes("bf16", 256);
  const double rs = ring_half(4 * E, 4, cl.intra) + ring_half(4 * E / 4, 2, cl.inter);
  for (const char* scope : {"all", "inter_node"}) {
    z.compress_scope = scope;
    const double gather =
        ring_half(wb * E / 4, 2, cl.inter) + ring_half((z.compress_scope == "all" ? wb : 4) * E, 4, cl.intra);
    EXPECT_NEAR(plan::predict(cfg, z, cl).dp, rs + gather, tol * rs) << scope;
  }
  // Top-k: 6 bytes a kept value, in the reduce-scatter's all-to-all.
  auto t = c;
  t.zero = 2;
  t.compression = "topk";
  t.topk_ratio = 0.01;
  t.grad_accum = 1;
  const auto topk = plan::predict(cfg, t, cl);
  EXPECT_NEAR(topk.dp - ring_half(4 * E, 8, cl.inter), ring_half(6 * 0.01 * E, 8, cl.inter), tol * topk.dp);
}

TEST(Plan, CollectivesHideOnlyWhatTheLibraryMoves) {
  // A link's allreduce rate falls from allreduce_gbs at 16 MiB to
  // allreduce_large_gbs at 256 MiB (geometric in between), and overlap is
  // the share of a nonblocking collective that compute hides.
  plan::Link l{10, 1, 4, 4};
  EXPECT_DOUBLE_EQ(l.allreduce(1 << 30), 4);  // no large rate: one rate
  l.allreduce_large_gbs = 2;
  EXPECT_DOUBLE_EQ(l.allreduce(1 << 20), 4);
  EXPECT_DOUBLE_EQ(l.allreduce(16 << 20), 4);
  EXPECT_NEAR(l.allreduce(64 << 20), 4 * std::sqrt(0.5), 1e-12);
  EXPECT_DOUBLE_EQ(l.allreduce(256 << 20), 2);
  EXPECT_DOUBLE_EQ(l.allreduce(double(1) * (1 << 30)), 2);
  EXPECT_DOUBLE_EQ(l.exposed(1, 3), 0);
  EXPECT_DOUBLE_EQ(l.exposed(3, 1), 2);
  l.overlap = 0.5;
  EXPECT_DOUBLE_EQ(l.exposed(1, 3), 0.5);
  EXPECT_DOUBLE_EQ(l.exposed(1, 0.2), 0.8);
  l.overlap = 0;
  EXPECT_DOUBLE_EQ(l.exposed(1, 3), 1);

  // dp 4, ZeRO 0, compute slow enough to hide the gradient's allreduce
  // whole: it does where the library progresses alone, and every second
  // of it is exposed where it does not.
  const auto cfg = moe_model();
  plan::Candidate c;
  c.grid = comm::GridSizes{4, 1, 1, 4, 1, 1, 0, 0};
  c.micro_batch = 2;
  c.grad_accum = 1;
  plan::Cluster cl = small_cluster();
  cl.fp32_tflops = 1e-4;
  const auto hidden = plan::predict(cfg, c, cl);
  EXPECT_EQ(hidden.dp, 0);
  cl.intra.overlap = 0;
  const auto polled = plan::predict(cfg, c, cl);
  const double E = plan::stage_elements(cfg, model::StagePlan::whole(cfg)).trainable.total();
  EXPECT_NEAR(polled.dp, ring_allreduce(4 * E, 4, cl.intra), 1e-9 * polled.dp);
  EXPECT_NEAR(polled.step - hidden.step, polled.dp, 1e-9 * polled.step);
}

TEST(Plan, ExpertGroupsStayFlatAndExactInterNode) {
  // dp 8 x ep 2: the experts' gradients reduce over the 4 ranks holding
  // the same experts (stride 2, both nodes), flat, and in fp32 under
  // compress_scope = "inter_node"; the rest over the 8 in stages.
  const auto cfg = moe_model();
  auto cl = two_nodes();
  plan::Candidate c;
  c.grid = comm::GridSizes{8, 1, 1, 8, 1, 2, 0, 0};
  c.hierarchical = true;
  c.compression = "int8";
  c.compress_scope = "inter_node";
  c.zero = 1;
  const auto plan = plan::stage_plan(cfg, c, 0);
  const auto el = plan::stage_elements(cfg, plan);
  ASSERT_GT(el.trainable.experts, 0);
  // The ep 2 all-to-all stays inside a node: made free here.
  cl.intra = {1e9, 0};
  const double w = plan::wire_bytes("int8", 256);
  const double dense = ring_half(4 * el.trainable.data, 4, cl.intra) + ring_half(w * el.trainable.data / 4, 2, cl.inter);
  const double experts = ring_half(4 * el.trainable.experts, 4, cl.inter);
  const double gathers = ring_half(4 * el.trainable.data / 4, 2, cl.inter) + ring_half(4 * el.trainable.data, 4, cl.intra) +
                         ring_half(4 * el.trainable.experts, 4, cl.inter);
  EXPECT_NEAR(plan::predict(cfg, c, cl).dp, dense + experts + gathers, 1e-6 * (dense + experts));
  // The two-stage all-to-all: ep 8 over both nodes sends each row once
  // inside the node and once between nodes, 1 + 3 messages against 7.
  auto a = c;
  a.grid = comm::GridSizes{8, 1, 1, 8, 1, 8, 0, 0};
  auto b = a;
  b.hierarchical_a2a = true;
  plan::Cluster slow = cl;
  slow.inter = {1000, 1000};  // latency-bound
  EXPECT_LT(plan::predict(cfg, b, slow).a2a, 0.5 * plan::predict(cfg, a, slow).a2a);
}

TEST(Plan, YoungDalyInterval) {
  // 1,024 nodes of 43,800 h: M = 153,984 s; C = 0.5 s gives tau = sqrt(2 C M).
  const auto p = plan::plan_reliability(43800, 1024, {{"memory", 0.5, 60}, {"shared", 20, 300}});
  EXPECT_NEAR(p.system_mtbf_s, 43800.0 * 3600 / 1024, 1e-6);
  ASSERT_EQ(p.tiers.size(), 2u);
  EXPECT_NEAR(p.tiers[0].interval_s, std::sqrt(2 * 0.5 * p.system_mtbf_s), 1e-9);
  const double tau = p.tiers[0].interval_s, M = p.system_mtbf_s;
  EXPECT_NEAR(p.tiers[0].efficiency, 1 - 0.5 / tau - (60 + tau / 2) / M, 1e-12);
  EXPECT_EQ(p.best, 0);
  // The optimum beats any other interval; a set interval is evaluated as given.
  for (double t : {tau / 3, tau * 3}) {
    const auto q = plan::plan_reliability(43800, 1024, {{"memory", 0.5, 60}}, t);
    EXPECT_DOUBLE_EQ(q.tiers[0].interval_s, t);
    EXPECT_LT(q.tiers[0].efficiency, p.tiers[0].efficiency);
  }
  EXPECT_THROW((void)plan::plan_reliability(0, 10, {{"x", 1, 1}}), Error);
  EXPECT_THROW((void)plan::plan_reliability(100, 10, {{"x", 0, 1}}), Error);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const char* kDeck = R"(
[model]
vocab_size = 256
d_model = 64
n_layers = 4
n_heads = 4
seq_len = 32
[moe]
n_experts = 8
top_k = 2
d_expert = 64
[train]
micro_batch = 2
grad_accum = 4
)";

TEST(Plan, SearchReturnsDecksThatLoad) {
  const auto cluster = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {}, 1);
  plan::SearchOptions o;
  o.world = 4;
  o.top = 10;
  o.a2a_compressions = {"none", "bf16"};
  o.weight_compressions = {"none", "int8"};
  const auto r = plan::search(base, cluster, o);
  ASSERT_FALSE(r.top.empty());
  EXPECT_GT(r.layouts, 4);
  EXPECT_EQ(r.global_batch, 8);
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& t = r.top[i];
    EXPECT_NO_THROW((void)plan::candidate_config(base, t.candidate, 4)) << t.candidate.describe();
    EXPECT_EQ(t.candidate.grid.dp * t.candidate.micro_batch * t.candidate.grad_accum, 8) << t.candidate.describe();
    if (i > 0) EXPECT_GE(t.cost.step, r.top[i - 1].cost.step);
    EXPECT_TRUE(t.cost.fits);
    // The all-to-all's wire format varies only where there is an all-to-all.
    if (t.candidate.grid.ep == 1) EXPECT_EQ(t.candidate.a2a_compression, "none") << t.candidate.describe();
    if (t.candidate.zero == 0) EXPECT_EQ(t.candidate.weight_compression, "none") << t.candidate.describe();
    EXPECT_FALSE(t.cost.reason.empty());
  }
}

TEST(Plan, EachPlansMemoryIsItsOwn) {
  // Top-k's residuals are memory the dense wire formats do not need: every
  // plan's memory is the memory model's for that plan, whatever the other
  // policies searched with it.
  const auto cluster = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {}, 1);
  const auto cfg = model::ModelConfig::from_deck(base);
  plan::SearchOptions o;
  o.world = 4;
  o.top = 1000;
  o.compressions = {"none", "topk", "int8"};
  const auto r = plan::search(base, cluster, o);
  bool topk = false;
  for (const auto& t : r.top) {
    topk = topk || t.candidate.compression == "topk";
    EXPECT_EQ(t.cost.memory.total(), plan::peak_memory(cfg, t.candidate).total()) << t.candidate.describe();
  }
  EXPECT_TRUE(topk);
}

TEST(Plan, NothingFitsNamesTheSmallest) {
  auto cluster = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  cluster.memory_gib = 1e-4;
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {}, 1);
  plan::SearchOptions o;
  o.world = 2;
  const auto r = plan::search(base, cluster, o);
  EXPECT_TRUE(r.top.empty());
  EXPECT_GT(r.pruned_memory, 0);
  EXPECT_GT(r.best_unfit.cost.memory.total(), 0);
}

TEST(Plan, SearchOffersHierarchicalCollectivesAcrossNodes) {
  // One layer (no pipeline), heads for tp <= 4: every data group of 8
  // ranks spans both nodes of 4, so every layout has a hierarchical twin.
  auto cl = two_nodes();
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {"model.n_layers=1"}, 1);
  plan::SearchOptions o;
  o.world = 8;
  o.top = 1000;
  o.compressions = {"none", "int8"};
  o.weight_compressions = {"none", "bf16"};
  const auto r = plan::search(base, cl, o);
  EXPECT_EQ(r.refused, 0);
  bool hier = false, hier_a2a = false, scoped = false;
  for (const auto& t : r.top) {
    EXPECT_NO_THROW((void)plan::candidate_config(base, t.candidate, 8)) << t.candidate.describe();
    hier = hier || t.candidate.hierarchical;
    hier_a2a = hier_a2a || t.candidate.hierarchical_a2a;
    scoped = scoped || t.candidate.compress_scope == "inter_node";
    // Only groups that span the nodes are split in stages.
    const auto& g = t.candidate.grid;
    if (t.candidate.hierarchical) EXPECT_GT(g.dp * g.cp * g.tp, cl.devices_per_node) << t.candidate.describe();
    if (t.candidate.hierarchical_a2a) EXPECT_GT(g.ep * g.tp, cl.devices_per_node) << t.candidate.describe();
  }
  EXPECT_TRUE(hier);
  EXPECT_TRUE(hier_a2a);
  EXPECT_TRUE(scoped);
  // Without varying them, the deck's collectives, where the layout can
  // have them (parallel.auto keeps the deck's policies).
  {
    const auto hdeck = deck::Config::from_text(kDeck, "plan-test.toml",
                                               {"model.n_layers=1", "parallel.hierarchical=true"}, 1);
    auto f = o;
    f.vary_collectives = false;
    const auto fixed = plan::search(hdeck, cl, f);
    ASSERT_FALSE(fixed.top.empty());
    for (const auto& t : fixed.top) {
      EXPECT_TRUE(t.candidate.hierarchical) << t.candidate.describe();
      EXPECT_FALSE(t.candidate.hierarchical_a2a) << t.candidate.describe();
      EXPECT_EQ(t.candidate.compress_scope, "all") << t.candidate.describe();
    }
  }
  // 6 ranks on nodes of 4: no data group fills its nodes evenly (6 ranks,
  // 4 + 2; or 3 in a node of 4), which the hierarchical collectives need.
  {
    auto six = o;
    six.world = 6;
    six.global_batch = 12;
    const auto r6 = plan::search(base, cl, six);
    ASSERT_FALSE(r6.top.empty());
    for (const auto& t : r6.top)
      EXPECT_FALSE(t.candidate.hierarchical || t.candidate.hierarchical_a2a) << t.candidate.describe();
  }
  // On one node nothing spans: every plan is flat.
  cl.nodes = 1;
  cl.devices_per_node = 8;
  for (const auto& t : plan::search(base, cl, o).top) {
    EXPECT_FALSE(t.candidate.hierarchical || t.candidate.hierarchical_a2a) << t.candidate.describe();
  }
}

TEST(Plan, ClusterFileErrorsNameTheKey) {
  const auto missing = write_file("c1.toml", "[cluster]\nnodes = 2\ndevices_per_node = 4\n[device]\nmemory_gib = 8\n");
  try {
    (void)plan::load_cluster(missing);
    FAIL() << "a cluster without fp32_tflops loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32_tflops"), std::string::npos) << e.what();
  }
  const auto bad = write_file("c2.toml", "[cluster]\nnodes = 0\n");
  try {
    (void)plan::load_cluster(bad);
    FAIL() << "nodes = 0 loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nodes"), std::string::npos) << e.what();
  }
  const auto typo = write_file("c3.toml", "[clusterr]\nnodes = 1\n");
  EXPECT_THROW((void)plan::load_cluster(typo), Error);
  // What to_toml writes, load_cluster reads back.
  const auto h100 = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/h100-sxm-ib400.toml");
  const auto again = plan::load_cluster(write_file("c4.toml", plan::to_toml(h100)));
  EXPECT_EQ(again.devices(), 2048);
  EXPECT_DOUBLE_EQ(again.bf16_tflops, h100.bf16_tflops);
  EXPECT_DOUBLE_EQ(again.inter.bandwidth_gbs, h100.inter.bandwidth_gbs);
  const auto local = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  const auto local2 = plan::load_cluster(write_file("c5.toml", plan::to_toml(local)));
  EXPECT_DOUBLE_EQ(local2.intra.overlap, local.intra.overlap);
  EXPECT_DOUBLE_EQ(local2.inter.allreduce_large_gbs, local.inter.allreduce_large_gbs);
  EXPECT_LT(local.intra.overlap, 1);
  const auto over = write_file("c6.toml", "[cluster]\nnodes = 1\ndevices_per_node = 2\n[device]\nfp32_tflops = 1\nmemory_gib = 8\n"
                                          "memory_bandwidth_gbs = 10\n[intra_node]\nbandwidth_gbs = 1\noverlap = 1.5\n");
  try {
    (void)plan::load_cluster(over);
    FAIL() << "overlap = 1.5 loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Plan, OffloadIsWeighedAgainstRecomputation) {
  // Room for the resident model only with full recomputation, and for the
  // offloaded one without any: both are evaluated (less recomputation with
  // more offload is not dominated), and each is predicted as it would be
  // alone.
  auto cluster = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {"moe.n_experts=32", "moe.d_expert=256"}, 1);
  const auto cfg = model::ModelConfig::from_deck(base);
  plan::Candidate c = plan::Candidate::from_deck(base);
  auto with = [&](const char* rc, bool off) {
    plan::Candidate x = c;
    x.recompute = rc;
    x.offload_experts = x.offload_optimizer = off;
    return x;
  };
  const double none = plan::peak_memory(cfg, with("none", false)).total(),
               selective = plan::peak_memory(cfg, with("selective", false)).total(),
               full = plan::peak_memory(cfg, with("full", false)).total(),
               offloaded = plan::peak_memory(cfg, with("none", true)).total();
  const double room = std::max(full, offloaded) * 1.01;
  ASSERT_LT(room, std::min(none, selective)) << "the deck must need recomputation or offload to fit";
  cluster.memory_gib = room / 0.9 / 1073741824.0;
  plan::SearchOptions o;
  o.world = 1;
  o.top = 1000;
  const auto r = plan::search(base, cluster, o);
  bool recomputed = false, offload_alone = false;
  for (const auto& t : r.top) {
    if (t.candidate.offload_experts == false && t.candidate.recompute == "full") recomputed = true;
    if (t.candidate.offload_experts && t.candidate.recompute == "none") offload_alone = true;
    // Offloaded without recomputation fits, so offloaded with any is
    // dominated (as much offload, more recomputation).
    EXPECT_FALSE(t.candidate.offload_experts && t.candidate.recompute != "none") << t.candidate.describe();
  }
  EXPECT_TRUE(recomputed);
  EXPECT_TRUE(offload_alone);
}

TEST(Plan, ZbCountsItsDeferredCopies) {
  // The run's pipeline record at pp 2 under zb on this shape (m = 4
  // micro-batches of 2 sequences) has 466944 B more activation bytes on
  // each stage than under 1f1b: two micro-batches' copies of the Linear
  // products' operands. The planner's bound is pp - stage + 1 of them:
  // stage 1's two, and three on stage 0, where the run's W went into its
  // waits before the third was recorded.
  const auto base = deck::Config::from_text(
      kDeck, "plan-test.toml", {"parallel.pp=2", "pipeline.schedule=zb", "train.grad_accum=4"}, 2);
  const auto cfg = model::ModelConfig::from_deck(base);
  plan::Candidate c = plan::Candidate::from_deck(base);
  plan::Candidate ob = c;
  ob.schedule = "1f1b";
  for (int s = 0; s < 2; ++s) {
    const double held = plan::deferred_bytes(cfg, c, plan::stage_plan(cfg, c, s), s);
    EXPECT_EQ(held, 466944.0 / 2 * (2 - s + 1)) << "stage " << s;
    EXPECT_EQ(plan::deferred_bytes(cfg, ob, plan::stage_plan(cfg, ob, s), s), 0.0) << "stage " << s;
    EXPECT_EQ(plan::stage_memory(cfg, c, s).communication - plan::stage_memory(cfg, ob, s).communication, held)
        << "stage " << s;
    // bf16 products: bf16 copies, and one fp32 scratch W widens them into,
    // the widest input (64 rows of d = 64) and output gradient (64 of d).
    // (On the d = 64 test deck of tests/train the run's bf16 pipeline
    // record held half the fp32 copies' bytes plus 524288 B on stage 0,
    // whose dense FFN's 1024 columns are the widest, and 32768 B on
    // stage 1: these widths.)
    plan::Candidate half = c;
    half.precision = "bf16";
    EXPECT_EQ(plan::deferred_bytes(cfg, half, plan::stage_plan(cfg, half, s), s), held / 2 + 4.0 * 64 * (64 + 64))
        << "stage " << s;
  }
}

TEST(Plan, OffloadCountsAnInterleavedStagesOwnLayers) {
  // pp 2 with 2 virtual stages over 4 MoE layers: stage 0 holds layers 0
  // and 2, not the layer between its chunks.
  const auto cfg = moe_model();
  plan::Candidate c;
  c.grid = comm::GridSizes{2, 1, 1, 1, 2, 1, 0, 0};
  c.schedule = "interleaved";
  c.virtual_stages = 2;
  c.grad_accum = 2;
  c.offload_experts = true;
  for (int s = 0; s < 2; ++s) {
    const auto plan = plan::stage_plan(cfg, c, s);
    std::int64_t held = 0;
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) held += plan.holds_layer(l) && cfg.is_moe_layer(l) ? 1 : 0;
    ASSERT_EQ(held, 2) << "stage " << s;
    const auto o = plan::offloaded_bytes(cfg, c, plan, 1);
    EXPECT_EQ(o.moe_layers, held) << "stage " << s;
    EXPECT_EQ(o.values, o.layer * double(held)) << "stage " << s;
  }
}

// Expert offload in the memory model: the experts' values and gradients
// (and moments) leave the store's categories exactly, a layer's worth per
// prefetch depth comes back as the offload term; and the search takes it
// when nothing fits resident, paying its paging and writeback time.
TEST(Plan, OffloadIsTheLastMemoryPolicy) {
  auto cluster = plan::load_cluster(std::string(EXAMOE_SOURCE_DIR) + "/input/clusters/local-2core.toml");
  const auto base = deck::Config::from_text(kDeck, "plan-test.toml", {"moe.n_experts=32", "moe.d_expert=256"}, 1);
  const auto cfg = model::ModelConfig::from_deck(base);
  plan::Candidate c = plan::Candidate::from_deck(base);
  c.recompute = "full";
  c.checkpoint_layers = "sqrt";
  const auto resident = plan::peak_memory(cfg, c);
  plan::Candidate off = c;
  off.offload_experts = off.offload_optimizer = true;
  off.offload_prefetch = 1;
  const auto offloaded = plan::peak_memory(cfg, off);
  // 4 MoE layers x 32 experts x 3 matrices of 256 x 64, fp32.
  const double experts = 4.0 * 32 * 3 * 256 * 64 * 4;
  EXPECT_DOUBLE_EQ(resident.parameters - offloaded.parameters, experts);
  EXPECT_DOUBLE_EQ(resident.gradients - offloaded.gradients, experts);
  EXPECT_DOUBLE_EQ(resident.optimizer - offloaded.optimizer, 2 * experts);
  EXPECT_DOUBLE_EQ(offloaded.offload, 2 * experts / 4);  // one layer's values and gradients
  EXPECT_EQ(resident.offload, 0);

  plan::SearchOptions o;
  o.world = 1;
  const auto roomy = plan::search(base, cluster, o);
  ASSERT_FALSE(roomy.top.empty());
  for (const auto& t : roomy.top) EXPECT_FALSE(t.candidate.offload_experts) << t.candidate.describe();
  // Room for the offloaded plan but for no resident one.
  cluster.memory_gib = (offloaded.total() + resident.total()) / 2 / 0.9 / 1073741824.0;
  const auto tight = plan::search(base, cluster, o);
  ASSERT_FALSE(tight.top.empty());
  for (const auto& t : tight.top) {
    EXPECT_TRUE(t.candidate.offload_experts) << t.candidate.describe();
    EXPECT_GT(t.cost.offload, 0) << t.candidate.describe();
    EXPECT_NE(t.candidate.describe().find("offload experts"), std::string::npos);
  }
}
