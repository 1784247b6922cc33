#pragma once
// Weights<T, D>: every model tensor as an unmanaged, correctly shaped View
// onto memory someone else owns (the ParameterStore's flat fp32 buffers in
// training, a flat double buffer in gradient checks). The same struct serves
// values and gradients: the transformer reads one and accumulates into the
// other.
//
// Binding goes through the parameter specs (parameter_specs.hpp), so the
// shapes here can never drift from the checkpoint contract: bind_weights
// asks a callback for the data pointer of each spec and checks the element
// count against the shape it builds.
//
// With tie_embeddings there is no lm_head.weight: `lm_head` aliases `embed`
// (same pointer), so the LM head's weight gradient lands in the embedding's
// gradient.
//
// A pipeline stage's plan binds only the tensors its stage holds
// (model::holds); the others stay empty Views the stage never reads.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/stage_plan.hpp"

namespace exa::model {

template <class T, class D = Device>
struct LayerWeights {
  using U = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using W1 = Kokkos::View<T*, Layout, D, U>;
  using W2 = Kokkos::View<T**, Layout, D, U>;
  using W3 = Kokkos::View<T***, Layout, D, U>;

  W1 attn_norm;                 // [d]
  W2 wq, wk, wv, wo;            // [H*hd,d], [Hkv*hd,d], [Hkv*hd,d], [d,H*hd]
  W1 ffn_norm;                  // [d]
  bool moe = false;             // MoE layer (router/experts/shared) or dense (mlp_*)
  W2 router;                    // [E,d]
  W3 w1, w3, w2;                // experts [E,F,d], [E,F,d], [E,d,F]
  W3 shared_w1, shared_w3, shared_w2;  // [S,F,d], [S,F,d], [S,d,F]; empty when S = 0
  W2 mlp_w1, mlp_w3, mlp_w2;    // dense SwiGLU [d_ff,d], [d_ff,d], [d,d_ff]

  // LoRA (parameter_specs.hpp): a projection's A [.., r, in] and B
  // [.., out, r], empty for a projection without adapters, and their scale.
  struct Lora2 {
    W2 a, b;
  };
  struct Lora3 {
    W3 a, b;
  };
  Lora2 lora_wq, lora_wk, lora_wv, lora_wo, lora_mlp_w1, lora_mlp_w3, lora_mlp_w2, lora_router;
  Lora3 lora_shared_w1, lora_shared_w3, lora_shared_w2;
  Lora3 lora_w1, lora_w3, lora_w2;  // the routed experts': [E, r, in], [E, out, r] (this rank's experts)
  double lora_scale = 0.0;
  double lora_dropout = 0.0;  // on the adapters' input, in training (the context's lora_key)
};

template <class T, class D = Device>
struct Weights {
  using W1 = typename LayerWeights<T, D>::W1;
  using W2 = typename LayerWeights<T, D>::W2;
  W2 embed;                              // [V,d]
  // LoRA on the embedding (lora.targets = embeddings): A [r,d], B [V,r];
  // with tie_embeddings the LM head reads them too.
  typename LayerWeights<T, D>::Lora2 lora_embed;
  double lora_scale = 0.0;
  std::vector<LayerWeights<T, D>> layers;
  W1 norm;                               // [d]
  W2 lm_head;                            // [V,d]; aliases embed when tie_embeddings
};

// Binds every tensor of `cfg`'s model as `plan` holds it. `ptr_of(spec)`
// returns the data pointer of the plan's box of tensor `spec`
// (local_box(spec, plan): the whole tensor, or the plan's experts of an
// expert tensor) as contiguous row-major elements of T in D's memory space.
template <class T, class D = Device, class PtrOf>
Weights<T, D> bind_weights(const ModelConfig& cfg, const StagePlan& plan, PtrOf&& ptr_of) {
  using L = LayerWeights<T, D>;
  std::unordered_map<std::string, std::pair<T*, std::int64_t>> p;
  std::unordered_map<std::string, bool> elsewhere;  // another pipeline stage's tensor: left unbound (empty)
  std::unordered_map<std::string, bool> frozen;     // may come without data: a gradient it does not have
  for (const auto& s : parameter_specs(cfg)) {
    if (!s.trainable) frozen[s.name] = true;
    if (!holds(s, plan, cfg)) {
      elsewhere[s.name] = true;
      continue;
    }
    p[s.name] = {ptr_of(s), local_box(s, plan).numel()};
  }
  auto get = [&](const std::string& name, std::int64_t numel) -> T* {
    auto it = p.find(name);
    if (it == p.end() && elsewhere.count(name)) return nullptr;
    EXA_REQUIRE(it != p.end(), "bind_weights: the model has no tensor '{}'", name);
    EXA_REQUIRE(it->second.second == numel, "bind_weights: '{}' has {} elements, the model needs {}", name,
                it->second.second, numel);
    EXA_REQUIRE(it->second.first != nullptr || numel == 0 || frozen.count(name), "bind_weights: '{}' has no data",
                name);
    return it->second.first;
  };
  // This plan's extents: tensor parallelism splits heads, FFN columns and
  // the vocabulary, expert parallelism the experts; another pipeline stage's
  // tensors stay unbound.
  const std::int64_t V = plan.vocab_end - plan.vocab_begin, d = cfg.d_model, hd = cfg.head_dim(), H = plan.heads,
                     Hkv = plan.kv_heads, E = plan.local_experts(), F = plan.d_expert, S = cfg.n_shared_experts,
                     Fd = plan.d_ff, Fs = plan.d_shared, r = cfg.lora.rank;
  // A tensor bound without data (a frozen tensor's gradient) is an empty
  // View, which the layers take as "no gradient wanted".
  auto v1 = [&](const std::string& n, std::int64_t a) {
    T* d = elsewhere.count(n) ? nullptr : get(n, a);
    return d == nullptr ? typename L::W1() : typename L::W1(d, a);
  };
  auto v2 = [&](const std::string& n, std::int64_t a, std::int64_t b) {
    T* d = elsewhere.count(n) ? nullptr : get(n, a * b);
    return d == nullptr ? typename L::W2() : typename L::W2(d, a, b);
  };
  auto v3 = [&](const std::string& n, std::int64_t a, std::int64_t b, std::int64_t c) {
    T* d = elsewhere.count(n) ? nullptr : get(n, a * b * c);
    return d == nullptr ? typename L::W3() : typename L::W3(d, a, b, c);
  };
  // The adapters of a projection [out, in] (local extents), when it has them.
  auto lora2 = [&](const std::string& n, std::int64_t out, std::int64_t in, bool on) {
    typename L::Lora2 l;
    if (!on || !cfg.lora.enabled()) return l;
    l.a = v2(lora_a_name(n), r, in);
    l.b = v2(lora_b_name(n), out, r);
    return l;
  };
  auto lora3 = [&](const std::string& n, std::int64_t out, std::int64_t in, bool on, std::int64_t stack) {
    typename L::Lora3 l;
    if (!on || !cfg.lora.enabled()) return l;
    l.a = v3(lora_a_name(n), stack, r, in);
    l.b = v3(lora_b_name(n), stack, out, r);
    return l;
  };
  const auto& lt = cfg.lora.targets;
  Weights<T, D> w;
  w.embed = v2("embed.weight", V, d);
  w.lora_embed = lora2("embed.weight", V, d, lt.embeddings);
  w.lora_scale = cfg.lora.scale();
  for (std::int64_t i = 0; i < cfg.n_layers; ++i) {
    const std::string pre = "layers." + std::to_string(i) + ".";
    L l;
    l.attn_norm = v1(pre + "attn_norm.weight", d);
    l.wq = v2(pre + "attn.wq.weight", H * hd, d);
    l.wk = v2(pre + "attn.wk.weight", Hkv * hd, d);
    l.wv = v2(pre + "attn.wv.weight", Hkv * hd, d);
    l.wo = v2(pre + "attn.wo.weight", d, H * hd);
    l.lora_wq = lora2(pre + "attn.wq.weight", H * hd, d, lt.attention);
    l.lora_wk = lora2(pre + "attn.wk.weight", Hkv * hd, d, lt.attention);
    l.lora_wv = lora2(pre + "attn.wv.weight", Hkv * hd, d, lt.attention);
    l.lora_wo = lora2(pre + "attn.wo.weight", d, H * hd, lt.attention);
    l.lora_scale = cfg.lora.scale();
    l.lora_dropout = cfg.lora.dropout;
    l.ffn_norm = v1(pre + "ffn_norm.weight", d);
    l.moe = cfg.is_moe_layer(i);
    if (l.moe) {
      l.router = v2(pre + "moe.router.weight", cfg.n_experts, d);
      l.lora_router = lora2(pre + "moe.router.weight", cfg.n_experts, d, lt.router);
      l.w1 = v3(pre + "moe.experts.w1", E, F, d);
      l.w3 = v3(pre + "moe.experts.w3", E, F, d);
      l.w2 = v3(pre + "moe.experts.w2", E, d, F);
      l.lora_w1 = lora3(pre + "moe.experts.w1", F, d, lt.experts, E);
      l.lora_w3 = lora3(pre + "moe.experts.w3", F, d, lt.experts, E);
      l.lora_w2 = lora3(pre + "moe.experts.w2", d, F, lt.experts, E);
      if (S > 0) {
        l.shared_w1 = v3(pre + "moe.shared.w1", S, Fs, d);
        l.shared_w3 = v3(pre + "moe.shared.w3", S, Fs, d);
        l.shared_w2 = v3(pre + "moe.shared.w2", S, d, Fs);
        l.lora_shared_w1 = lora3(pre + "moe.shared.w1", Fs, d, lt.shared_experts, S);
        l.lora_shared_w3 = lora3(pre + "moe.shared.w3", Fs, d, lt.shared_experts, S);
        l.lora_shared_w2 = lora3(pre + "moe.shared.w2", d, Fs, lt.shared_experts, S);
      }
    } else {
      l.mlp_w1 = v2(pre + "mlp.w1", Fd, d);
      l.mlp_w3 = v2(pre + "mlp.w3", Fd, d);
      l.mlp_w2 = v2(pre + "mlp.w2", d, Fd);
      l.lora_mlp_w1 = lora2(pre + "mlp.w1", Fd, d, lt.dense_ffn);
      l.lora_mlp_w3 = lora2(pre + "mlp.w3", Fd, d, lt.dense_ffn);
      l.lora_mlp_w2 = lora2(pre + "mlp.w2", d, Fd, lt.dense_ffn);
    }
    w.layers.push_back(l);
  }
  w.norm = v1("norm.weight", d);
  w.lm_head = cfg.tie_embeddings ? w.embed : v2("lm_head.weight", V, d);
  return w;
}

// The whole model (every expert): `ptr_of(spec)` points at the whole tensor.
template <class T, class D = Device, class PtrOf>
Weights<T, D> bind_weights(const ModelConfig& cfg, PtrOf&& ptr_of) {
  return bind_weights<T, D>(cfg, StagePlan::whole(cfg), std::forward<PtrOf>(ptr_of));
}

// Offsets of every spec in a flat buffer holding the whole tensors back to
// back in spec order (the ParameterStore's layout at one rank), and the total.
inline std::vector<std::int64_t> flat_offsets(const std::vector<ParamSpec>& specs, std::int64_t* total = nullptr) {
  std::vector<std::int64_t> off;
  std::int64_t t = 0;
  for (const auto& s : specs) {
    off.push_back(t);
    t += s.numel();
  }
  if (total) *total = t;
  return off;
}

// Binds onto a flat buffer of whole tensors in spec order (any T, any D):
// e.g. a View1<double> of the model's total size for gradient checks.
template <class T, class D>
Weights<T, D> bind_flat(const ModelConfig& cfg, const Kokkos::View<T*, Layout, D>& flat) {
  const auto specs = parameter_specs(cfg);
  std::int64_t total = 0;
  const auto off = flat_offsets(specs, &total);
  EXA_REQUIRE(std::int64_t(flat.extent(0)) == total, "bind_flat: buffer has {} elements, the model has {}",
              flat.extent(0), total);
  std::unordered_map<std::string, std::int64_t> at;
  for (std::size_t i = 0; i < specs.size(); ++i) at[specs[i].name] = off[i];
  return bind_weights<T, D>(cfg, [&](const ParamSpec& s) { return flat.data() + at.at(s.name); });
}

class ParameterStore;
// The store's fp32 values / gradients. Every tensor must be held on this
// rank as the plan's whole box (no ZeRO shard of it): the single-rank
// layout, or expert parallelism without ZeRO.
Weights<float, Device> bind_values(const ModelConfig& cfg, const ParameterStore& store);
Weights<float, Device> bind_grads(const ModelConfig& cfg, const ParameterStore& store);
Weights<float, Device> bind_values(const ModelConfig& cfg, const StagePlan& plan, const ParameterStore& store);
Weights<float, Device> bind_grads(const ModelConfig& cfg, const StagePlan& plan, const ParameterStore& store);

}  // namespace exa::model
