#include "plan/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "parallel/data/data_parallel.hpp"
#include "parallel/data/shard_layout.hpp"
#include "model/parameter_specs.hpp"
#include "model/unit_hooks.hpp"
#include "parallel/layout.hpp"
#include "parallel/pipeline/schedules.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::plan {

namespace {

// The search sizes the same stage under many policies: the state bytes of
// a (model, plan, zero, group sizes) are computed once.
std::string state_key(const model::ModelConfig& c, const model::StagePlan& p, int zero, int data, int edata) {
  const auto& t = c.lora.targets;
  std::string k = fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {}|{} {} {} {} {} {} {} {} {} {} {}|{} {} {}",
                              c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff, c.seq_len,
                              c.tie_embeddings, c.n_experts, c.top_k, c.d_expert, c.moe_every, c.n_shared_experts,
                              fmt::format("{}:{}{}{}{}{}{}", c.lora.rank, t.attention, t.dense_ffn, t.shared_experts,
                                          t.experts, t.router, t.embeddings),
                              p.layer_begin, p.layer_end, p.heads, p.kv_heads, p.d_ff, p.d_expert, p.expert_begin,
                              p.expert_end, p.vocab_begin, p.vocab_end, p.d_shared, zero, data, edata);
  for (const auto& [a, b] : p.chunks) k += fmt::format(" {}-{}", a, b);
  return k;
}

// Each engine of a stage: its units' element counts, whether it holds the
// routed experts (the ExpertData group) or LoRA's frozen model, and whether
// it holds the tied embedding. They depend on the plan only: taken once
// from the ShardLayout the run builds.
struct Engine {
  std::vector<std::int64_t> units;
  bool experts = false, frozen = false, tied = false;
};

const std::vector<Engine>& engines_of(const model::ModelConfig& cfg, const model::StagePlan& plan) {
  static std::unordered_map<std::string, std::vector<Engine>> cache;
  const auto key = state_key(cfg, plan, 0, 0, 0);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::vector<Engine> engines;
    for (const auto& e : parallel::data::engine_groups(cfg, plan)) {
      std::vector<model::Box> boxes;
      Engine g{{}, e.experts, e.frozen, false};
      for (const auto& s : e.specs) {
        boxes.push_back(model::local_box(s, plan, cfg));
        g.tied = g.tied || (cfg.tie_embeddings && model::unit_of(s.name, cfg.n_layers) == 0);
      }
      const parallel::data::ShardLayout L(e.specs, boxes, cfg.n_layers, 1, 0);
      for (int u = 0; u < L.size(); ++u) g.units.push_back(L.unit(u).numel);
      engines.push_back(std::move(g));
    }
    it = cache.emplace(key, std::move(engines)).first;
  }
  return it->second;
}

}  // namespace

StageElements stage_elements(const model::ModelConfig& cfg, const model::StagePlan& plan) {
  StageElements t;
  for (const auto& e : engines_of(cfg, plan))
    for (const auto n : e.units) {
      (e.experts ? t.parameters.experts : t.parameters.data) += double(n);
      if (!e.frozen) (e.experts ? t.trainable.experts : t.trainable.data) += double(n);
    }
  return t;
}

MemoryBytes state_bytes(const model::ModelConfig& cfg, const model::StagePlan& plan, int zero, int data_size,
                        int expert_data_size, bool deferred) {
  // Each engine's units cut into parts as the run cuts them (block =
  // ceil(numel / parts), part 0 the first block).
  double local = 0, trainable = 0, params = 0, grads = 0;
  for (const auto& e : engines_of(cfg, plan)) {
    const std::int64_t parts = zero > 0 ? (e.experts ? expert_data_size : data_size) : 1;
    // The ZeRO engine's buffers (parallel/data/zero_engine.cpp): two
    // alternating unit slots (a third for the tied embedding) for ZeRO 2's
    // gradients and ZeRO 3's parameters, a padded whole-model copy of the
    // parameters for ZeRO 1 and 2 and of the gradients for ZeRO 1. A
    // frozen engine has the parameters' only.
    std::int64_t alternating = 0, padded_total = 0, padded0 = 0;
    double mine = 0;
    for (std::size_t u = 0; u < e.units.size(); ++u) {
      const std::int64_t block = (e.units[u] + parts - 1) / parts, padded = block * parts;
      mine += double(std::min(e.units[u], block));
      padded_total += padded;
      if (u == 0) padded0 = padded;
      if (!(e.tied && u == 0)) alternating = std::max(alternating, padded);
    }
    local += mine;
    const double slots = 2.0 * double(alternating) + (e.tied ? double(padded0) : 0.0);
    if (zero == 3) params += slots;
    if (zero == 1 || zero == 2) params += double(padded_total);
    if (e.frozen) continue;
    trainable += mine;
    if (zero >= 2) grads += slots + (deferred && !e.experts ? 2.0 * double(alternating) : 0.0);
    if (zero == 1) grads += double(padded_total);
  }
  MemoryBytes m;
  m.parameters = 4 * (local + params);  // the store's fp32 pieces
  m.gradients = 4 * (trainable + grads);
  m.optimizer = 8 * trainable;  // AdamW's two moments
  return m;
}

int steady_micro(int n_micro, int pp, int chunks) {
  // Every schedule's warm-up is over within (chunks + 1) * pp micro-batches
  // (interleaved: (pp - stage - 1) * 2 + (chunks - 1) * pp forwards); a
  // multiple of pp, which interleaved needs.
  const int m = (chunks + 1) * pp;
  return n_micro <= m ? n_micro : m;
}

model::StagePlan stage_plan(const model::ModelConfig& cfg, const Candidate& c, int stage) {
  // The balanced split costs a pass over every tensor and a dynamic
  // programme; the search asks for the same stages under many policies.
  static std::unordered_map<std::string, model::StagePlan> cache;
  const auto& g = c.grid;
  const std::string key = fmt::format("{}|{} {} {} {} {} {} {} {} {}", state_key(cfg, model::StagePlan{}, 0, 0, 0), g.pp,
                                      g.tp, g.etp, g.ep, c.sequence_parallel, c.schedule == "interleaved" ? c.virtual_stages : 1,
                                      c.layers_per_stage, stage, g.cp);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  parallel::pipeline::PipelineOptions po;
  po.schedule = c.schedule;
  po.virtual_stages = c.schedule == "interleaved" ? c.virtual_stages : 1;
  if (c.layers_per_stage != "auto") {
    po.layers_per_stage = parallel::pipeline::parse_layers_per_stage(c.layers_per_stage, cfg.n_layers, c.grid.pp,
                                                                     "pipeline.layers_per_stage");
  } else if (g.pp > 1 && po.virtual_stages == 1) {
    // The balanced split, once per (model, pp), handed on as counts.
    static std::unordered_map<std::string, std::vector<std::int64_t>> counts;
    const std::string ck = fmt::format("{}|{}", state_key(cfg, model::StagePlan{}, 0, 0, 0), g.pp);
    auto it = counts.find(ck);
    if (it == counts.end()) it = counts.emplace(ck, parallel::pipeline::balanced_layers(cfg, g.pp)).first;
    po.layers_per_stage = it->second;
  }
  comm::GridCoords at;
  at.pp = stage;
  auto plan = parallel::stage_plan_of(cfg, c.grid, at, po, c.sequence_parallel);
  cache.emplace(key, plan);
  return plan;
}

double recompute_segment(const Candidate& c, double layers) {
  if (c.recompute != "full" || c.checkpoint_layers == "all") return 1;
  if (c.checkpoint_layers == "sqrt") return std::ceil(std::sqrt(layers));
  return std::min(layers, double(std::stoll(c.checkpoint_layers)));
}

namespace {

// A micro-batch on one stage: its tokens (N, this cp rank's), the rows of
// the residual stream (Nr: N / tp under sequence parallelism), and the
// stage's MoE and dense layers.
struct StageRows {
  double N = 0, Nr = 0;
  std::int64_t n_moe = 0, n_dense = 0;
};

StageRows stage_rows(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan) {
  StageRows r;
  r.N = double(c.micro_batch * cfg.seq_len / c.grid.cp);
  r.Nr = plan.sequence_parallel ? r.N / double(plan.tp) : r.N;
  for (const auto& [l0, l1] : plan.layer_ranges())
    for (std::int64_t l = l0; l < l1; ++l) (cfg.is_moe_layer(l) ? r.n_moe : r.n_dense) += 1;
  return r;
}

// Whether the routed experts' rows and activations (xp or xr, ea, eb, eh)
// are kept in bf16: bf16 products without adapters on the experts
// (model/seams/token_dispatcher.hpp, stores_bf16).
bool experts_in_bf16(const model::ModelConfig& cfg, const Candidate& c) {
  return c.precision == "bf16" && !(cfg.lora.enabled() && cfg.lora.targets.experts);
}

}  // namespace

CheapBytes cheap_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                       std::int64_t layers) {
  const auto [N, Nr, n_moe, n_dense] = stage_rows(cfg, c, plan);
  const double d = double(cfg.d_model), rows = N * double(cfg.top_k), F = double(plan.d_expert),
               Fd = double(plan.d_ff), Fs = double(plan.d_shared), S = double(cfg.n_shared_experts);
  const double frac = double(layers) / double(std::max<std::int64_t>(1, plan.local_layers()));
  // eh in bf16 counts as half an fp32 tensor.
  const double eh = experts_in_bf16(cfg, c) ? rows * F / 2 : rows * F;
  const double moe = 2 * Nr * d + eh + S * N * Fs, dense = 2 * Nr * d + N * Fd;
  CheapBytes b;
  b.per_context = 4 * frac * (double(n_moe) * moe + double(n_dense) * dense);
  b.shared = 4 * (Nr * d + (n_moe > 0 ? eh + S * N * Fs : 0) + (n_dense > 0 ? N * Fd : 0));
  return b;
}

ScratchBytes scratch_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan) {
  const auto [N, Nr, n_moe, n_dense] = stage_rows(cfg, c, plan);
  const double d = double(cfg.d_model), hd = double(cfg.head_dim()), H = double(plan.heads),
               Hkv = double(plan.kv_heads), k = double(cfg.top_k), E = double(cfg.n_experts),
               F = double(plan.d_expert), Fd = double(plan.d_ff), Fs = double(plan.d_shared),
               S = double(cfg.n_shared_experts), rows = N * k;
  ScratchBytes b;
  // dres, dxn; dq, dout; dk, dv (LayerScratch)
  double act = 2 * Nr * d + 2 * N * H * hd + 2 * N * Hkv * hd;
  if (n_dense > 0) act += 3 * N * Fd;
  if (n_moe > 0) {
    act += N * k + N * E + Nr * d + (S > 0 ? 3 * N * Fs : 0);  // dgates, drouter, moe_y; dsa, dsb, dsh
    // The local dispatcher's dxp [rows, d] (dyp shares it) and deh (dea
    // shares it) and deb [rows, F] (in bf16 storage dea and deb at half
    // each); the all-to-all's send rows, dyp, dxp [rows, d], the exchanged
    // rows [R, d] twice (R = rows, balanced) and deh, dea, deb [R, F] (dea
    // and deb at half in bf16), in exa::ep:: buffers.
    if (c.grid.ep > 1) b.communication = 4 * (5 * rows * d + (experts_in_bf16(cfg, c) ? 2 : 3) * rows * F);
    else act += rows * d + 2 * rows * F;
  }
  b.activations = 4 * act;
  return b;
}

// zb's deferred weight gradients (parallel/pipeline/deferred_weights.hpp):
// a pending micro-batch keeps, per Linear product of the stage's layers, a
// copy of its output gradient and of its input (one per input and seam:
// wq/wk/wv share one, w1/w3 another), whole rows (gathered under sequence
// parallelism), in fp32, or in bf16 under bf16 products (those round them
// anyway; not under LoRA dropout) with one fp32 scratch of the largest
// input and output gradient that W widens them into. After a backward at most pp - stage micro-batches
// stay pending, so with the one just recorded pp - stage + 1 are held at
// once, and never all m: the last backward runs whole (on the d = 64 pp 2
// test deck the run held 2 on each stage, 466944 B against 1f1b's
// activation bytes; stage 0's W went into its waits before a third was
// recorded). The ledger counts them as communication (exa::pipeline::).
double deferred_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan, int stage) {
  if (c.schedule != "zb" || c.grid.pp < 2) return 0;
  const auto [N, Nr, n_moe, n_dense] = stage_rows(cfg, c, plan);
  const double d = double(cfg.d_model), hd = double(cfg.head_dim()), H = double(plan.heads),
               Hkv = double(plan.kv_heads), E = double(cfg.n_experts), Fd = double(plan.d_ff),
               Fs = double(plan.d_shared) * double(cfg.n_shared_experts);
  const double attn = N * d + N * (H + 2 * Hkv) * hd + N * H * hd + N * d;
  const double ffn = N * d + 3 * N * Fd + N * d;
  const double moe = N * d + N * E + (Fs > 0 ? N * d + 3 * N * Fs + N * d : 0);
  const double per_micro = double(n_moe) * (attn + moe) + double(n_dense) * (attn + ffn);
  const int held = std::min(c.grid.pp - stage + 1, std::max(0, int(c.micro_per_round()) - 1));
  const bool half = c.precision == "bf16" && !(cfg.lora.enabled() && cfg.lora.dropout > 0);
  if (!half || held == 0) return 4 * double(held) * per_micro;
  // One product's width: a dense FFN's d_ff, one shared expert's.
  const double Fl = n_dense > 0 ? Fd : 0.0, Fs1 = Fs > 0 ? double(plan.d_shared) : 0.0;
  const double widest_x = N * std::max({d, H * hd, Fl, Fs1});
  const double widest_dy = N * std::max({d, H * hd, Fl, Fs1, n_moe > 0 ? E : 0.0});
  return 2 * double(held) * per_micro + 4 * (widest_x + widest_dy);
}

double context_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                     std::int64_t layers) {
  const auto [N, Nr, n_moe, n_dense] = stage_rows(cfg, c, plan);
  const double d = double(cfg.d_model), hd = double(cfg.head_dim()), H = double(plan.heads),
               Hkv = double(plan.kv_heads), k = double(cfg.top_k), E = double(cfg.n_experts),
               F = double(plan.d_expert), Fd = double(plan.d_ff), Fs = double(plan.d_shared),
               S = double(cfg.n_shared_experts);
  // What a LayerContext keeps (model/activation_context.hpp), 4 bytes a
  // value or index; the routed rows balanced over the experts.
  const double attn = 3 * Nr * d + 2 * Nr + N * (2 * H * hd + 2 * Hkv * hd) + N * H;
  const double ffn_common = 2 * Nr * d + Nr;
  const double dense = 3 * N * Fd;
  const double rows = N * k;
  // xp (the all-to-all: the received rows xr, R = rows balanced, and their
  // two maps), yp [rows, d] and ea, eb, eh [rows, F]; xp or xr, ea, eb, eh
  // in bf16 count as half an fp32 tensor each.
  const double expert_rows = experts_in_bf16(cfg, c) ? rows * d * 1.5 + 1.5 * rows * F : 2 * rows * d + 3 * rows * F;
  const double moe = 2 * N * E + N + 2 * N * k + E + expert_rows + 2 * rows + (c.grid.ep > 1 ? 2 * rows : 0) +
                     3 * S * N * Fs;
  double per_layer_moe = 0, per_layer_dense = 0;
  const double frac = double(layers) / double(std::max<std::int64_t>(1, plan.local_layers()));
  per_layer_moe = attn + ffn_common + moe;
  per_layer_dense = attn + ffn_common + dense;
  double bytes = 4 * frac * (double(n_moe) * per_layer_moe + double(n_dense) * per_layer_dense);
  if (c.recompute == "selective") bytes -= cheap_bytes(cfg, c, plan, layers).per_context;
  if (c.recompute == "full") {
    // Only each layer's input stays (every N-th with checkpoint_layers).
    const double kept = std::ceil(double(layers) / recompute_segment(c, double(layers)));
    bytes = 4 * kept * Nr * d;
  }
  bytes += 4 * Nr * d;  // the chunk's output
  if (plan.has_head()) bytes += 4 * (Nr * d + N * double(plan.vocab_end - plan.vocab_begin) + 2 * N) + 4 * N;
  if (plan.has_embedding()) bytes += 4 * N;
  return bytes;
}

OffloadedBytes offloaded_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                               int expert_data) {
  OffloadedBytes o;
  if (!c.offload_experts) return o;
  // An interleaved stage's chunks: other stages' layers lie between them.
  for (const auto& [l0, l1] : plan.layer_ranges())
    for (std::int64_t l = l0; l < l1; ++l) o.moe_layers += cfg.is_moe_layer(l) ? 1 : 0;
  o.layer = 4.0 * 3.0 * double(plan.local_experts()) * double(plan.d_expert) * double(cfg.d_model);
  o.values = o.layer * double(o.moe_layers) / (c.zero > 0 ? double(expert_data) : 1.0);
  return o;
}

MemoryBytes stage_memory(const model::ModelConfig& cfg, const Candidate& c, int stage) {
  const auto plan = stage_plan(cfg, c, stage);
  const int data = c.grid.dp * c.grid.cp;
  MemoryBytes m = state_bytes(cfg, plan, c.zero, data, data / c.grid.ep, c.schedule == "zb" && c.grid.pp > 1);
  const int chunks = c.schedule == "interleaved" && c.grid.pp > 1 ? c.virtual_stages : 1;
  int alive = 1;
  if (c.grid.pp > 1) {
    // The most contexts alive is reached within a few rounds of the
    // pipeline's depth; more micro-batches only repeat the steady state.
    const int m = steady_micro(c.micro_per_round(), c.grid.pp, chunks);
    static std::map<std::tuple<std::string, int, int, int, int>, int> alive_of;
    const auto key = std::make_tuple(c.schedule, c.grid.pp, chunks, m, stage);
    auto it = alive_of.find(key);
    if (it == alive_of.end()) {
      const auto sched = parallel::pipeline::make_schedule(c.schedule, stage, c.grid.pp, chunks);
      it = alive_of.emplace(key, parallel::check_schedule(sched->ops(m), m, c.schedule, chunks)).first;
    }
    alive = it->second;
  }
  // Top-k's error feedback: a residual per trainable element of the rank's
  // boxes (the whole boxes, whatever the ZeRO stage), as communication.
  if (c.compression == "topk" && data > 1) m.communication += state_bytes(cfg, plan, 0, 1, 1).gradients;
  // Gradient projection keeps each task's gradient of this rank's trainable
  // part and two more such buffers (train/grad_projection.hpp), as gradients.
  if (c.projection_tasks > 0) m.gradients += double(c.projection_tasks + 2) * m.optimizer / 2;
  const std::int64_t layers = plan.local_layers() / chunks;
  m.activations = double(alive) * context_bytes(cfg, c, plan, layers);
  if (c.recompute == "full") {
    // The work context the recompute runs in: about one layer's.
    Candidate none = c;
    none.recompute = "none";
    m.activations += context_bytes(cfg, none, plan, 1);
  }
  if (c.recompute == "selective") m.activations += cheap_bytes(cfg, c, plan, layers).shared;
  if (c.offload_experts) {
    // The routed experts' values and gradients (and moments) leave the
    // store. Under ZeRO 0 backward holds the used experts (all, at worst)
    // of `prefetch` MoE layers, values and gradients
    // (model/expert_offload.hpp); otherwise, and in the optimizer, one
    // expert tensor at a time.
    const OffloadedBytes o = offloaded_bytes(cfg, c, plan, data / c.grid.ep);
    m.parameters -= o.values;
    m.gradients -= o.values;
    if (c.offload_optimizer) m.optimizer -= 2.0 * o.values;
    m.offload = c.zero == 0 ? 2.0 * double(std::min<std::int64_t>(c.offload_prefetch, o.moe_layers)) * o.layer
                            : 4.0 * o.layer / 3.0 / double(data / c.grid.ep);
  }
  const ScratchBytes sb = scratch_bytes(cfg, c, plan);
  m.activations += sb.activations;
  m.communication += sb.communication + deferred_bytes(cfg, c, plan, stage);
  return m;
}

MemoryBytes peak_memory(const model::ModelConfig& cfg, const Candidate& c, int* worst_stage) {
  MemoryBytes best;
  int worst = 0;
  for (int s = 0; s < c.grid.pp; ++s) {
    const auto m = stage_memory(cfg, c, s);
    if (s == 0 || m.total() > best.total()) {
      best = m;
      worst = s;
    }
  }
  if (worst_stage) *worst_stage = worst;
  return best;
}

}  // namespace exa::plan
