#include "model/stage_plan.hpp"

#include <utility>

#include "core/error.hpp"
#include "model/unit_hooks.hpp"

namespace exa::model {

StagePlan StagePlan::layers(const ModelConfig& cfg, std::int64_t l0, std::int64_t l1) {
  EXA_REQUIRE(0 <= l0 && l0 < l1 && l1 <= cfg.n_layers,
              "StagePlan: layers [{}, {}) are not a non-empty range of the model's {} layers", l0, l1,
              cfg.n_layers);
  StagePlan p;
  p.layer_begin = l0;
  p.layer_end = l1;
  p.n_layers = cfg.n_layers;
  p.heads = cfg.n_heads;
  p.kv_heads = cfg.n_kv_heads;
  p.d_ff = cfg.d_ff;
  p.d_expert = cfg.d_expert;
  p.expert_begin = 0;
  p.expert_end = cfg.n_experts;
  p.vocab_begin = 0;
  p.vocab_end = cfg.vocab_size;
  p.d_shared = cfg.d_expert;
  return p;
}

StagePlan StagePlan::interleaved(const ModelConfig& cfg, std::int64_t rank, std::int64_t pp, std::int64_t v) {
  EXA_REQUIRE(pp >= 1 && v >= 1 && 0 <= rank && rank < pp && cfg.n_layers % (pp * v) == 0,
              "StagePlan: {} layers do not split into pp x v = {} x {} equal chunks (stage {})", cfg.n_layers, pp, v,
              rank);
  const std::int64_t n = cfg.n_layers / (pp * v);
  StagePlan p = layers(cfg, rank * n, ((v - 1) * pp + rank + 1) * n);
  if (v > 1)
    for (std::int64_t c = 0; c < v; ++c) p.chunks.emplace_back((c * pp + rank) * n, (c * pp + rank + 1) * n);
  return p;
}

std::vector<std::pair<std::int64_t, std::int64_t>> StagePlan::layer_ranges() const {
  if (chunks.empty()) return {{layer_begin, layer_end}};
  return chunks;
}

std::int64_t StagePlan::local_layers() const {
  std::int64_t n = 0;
  for (const auto& [a, b] : layer_ranges()) n += b - a;
  return n;
}

bool StagePlan::holds_layer(std::int64_t l) const {
  for (const auto& [a, b] : layer_ranges())
    if (a <= l && l < b) return true;
  return false;
}

StagePlan StagePlan::with_experts(std::int64_t begin, std::int64_t end) const {
  EXA_REQUIRE(expert_begin <= begin && begin < end && end <= expert_end,
              "StagePlan: experts [{}, {}) are not a non-empty range of [{}, {})", begin, end, expert_begin,
              expert_end);
  StagePlan p = *this;
  p.expert_begin = begin;
  p.expert_end = end;
  return p;
}

StagePlan StagePlan::with_tensor_split(const ModelConfig& cfg, std::int64_t rank, std::int64_t tp,
                                       std::int64_t etp) const {
  EXA_REQUIRE(tp >= 1 && 0 <= rank && rank < tp && etp >= 1 && tp % etp == 0,
              "StagePlan: tensor-parallel part {} of {} with etp = {} (etp must divide tp)", rank, tp, etp);
  const std::pair<const char*, std::int64_t> split[] = {{"model.n_heads", cfg.n_heads},
                                                        {"model.n_kv_heads", cfg.n_kv_heads},
                                                        {"model.d_ff", cfg.moe_every == 1 ? 0 : cfg.d_ff},
                                                        {"model.vocab_size", cfg.vocab_size},
                                                        {"moe.d_expert (shared experts)",
                                                         cfg.n_shared_experts > 0 ? cfg.d_expert : 0}};
  for (const auto& [what, n] : split)
    EXA_REQUIRE(n % tp == 0, "StagePlan: {} = {} is not divisible by parallel.tp = {}; choose tp dividing it", what,
                n, tp);
  EXA_REQUIRE(cfg.moe_every == 0 || cfg.d_expert % etp == 0,
              "StagePlan: moe.d_expert = {} is not divisible by parallel.etp = {}", cfg.d_expert, etp);
  StagePlan p = *this;
  p.tp_rank = rank;
  p.tp = tp;
  p.etp = etp;
  // The Tp group's blocks of etp consecutive ranks each split the experts
  // (parallel/tensor/expert_tp_group.hpp).
  p.etp_rank = rank % etp;
  p.heads = cfg.n_heads / tp;
  p.kv_heads = cfg.n_kv_heads / tp;
  p.d_ff = cfg.d_ff / tp;
  p.d_shared = cfg.d_expert / tp;
  p.d_expert = cfg.d_expert / etp;
  p.vocab_begin = rank * (cfg.vocab_size / tp);
  p.vocab_end = p.vocab_begin + cfg.vocab_size / tp;
  return p;
}

Box local_box(const ParamSpec& spec, const StagePlan& plan) {
  Box b = whole_box(spec.shape);
  if (spec.ep_dim >= 0) {
    const auto d = static_cast<std::size_t>(spec.ep_dim);
    b.offset[d] = plan.expert_begin;
    b.extent[d] = plan.expert_end - plan.expert_begin;
  }
  const bool expert = spec.reduce == ReduceGroup::ExpertData;
  const std::int64_t parts = expert ? plan.etp : plan.tp, part = expert ? plan.etp_rank : plan.tp_rank;
  if (spec.tp_dim >= 0 && parts > 1) {
    const auto d = static_cast<std::size_t>(spec.tp_dim);
    b.extent[d] = spec.shape[d] / parts;
    b.offset[d] = part * b.extent[d];
  }
  return b;
}

bool holds(const ParamSpec& spec, const StagePlan& plan, const ModelConfig& cfg) {
  const int u = unit_of(spec.name, plan.n_layers);
  if (u == 0) return plan.has_embedding() || (cfg.tie_embeddings && plan.has_head());
  if (u == n_units(plan.n_layers) - 1) return plan.has_head();
  return plan.holds_layer(u - 1);
}

Box local_box(const ParamSpec& spec, const StagePlan& plan, const ModelConfig& cfg) {
  Box b = local_box(spec, plan);
  if (!holds(spec, plan, cfg)) b.extent[0] = 0;
  return b;
}

StagePlan StagePlan::whole(const ModelConfig& cfg) {
  EXA_REQUIRE(cfg.n_layers >= 1, "StagePlan: the model needs at least one layer (model.n_layers = {})",
              cfg.n_layers);
  return layers(cfg, 0, cfg.n_layers);
}

}  // namespace exa::model
