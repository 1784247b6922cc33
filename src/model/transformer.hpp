#pragma once
// The ExaMoE transformer (DESIGN.md, "The model") on one micro-batch:
// forward, explicit backward, evaluation and next-token logits.
//
//   tokens [B,T] -> embed -> L x { x += Attn(RMSNorm(x)); x += FFN(RMSNorm(x)) }
//          -> RMSNorm -> LM head -> mean cross-entropy over the valid targets
//   FFN = MoE (layers with cfg.is_moe_layer(i)) or dense SwiGLU.
//   loss = ce + sum over MoE layers of (aux + z)   (coefficients included)
//
// Typical use by a trainer (fp32, weights in a ParameterStore):
//
//   Transformer<float> model(cfg);
//   auto w = bind_values(cfg, store), g = bind_grads(cfg, store);
//   store.zero_grads();
//   for (micro-batch m of M) {
//     ForwardResult r = model.forward(w, inputs_m, targets_m);
//     model.backward(w, g, 1.0 / M);      // g += (1/M) d(loss_m)/d(params)
//   }
//
// Loss scaling: forward's loss is the micro-batch MEAN (ce over its valid
// targets, aux and z per MoE layer as the router defines them). backward
// ACCUMULATES (+=) loss_scale * d(loss)/d(param) into `grads`; the caller
// zeroes the gradients before the first micro-batch and passes loss_scale =
// 1/M for a mean over M micro-batches (or a token-weighted factor, or a
// mixed-precision loss scale). backward needs the activations of the
// immediately preceding forward() with the same weights; eval() and
// next_logits() overwrite them.
//
// Templated on the scalar type T (float for training, double for the
// finite-difference tests) and the Kokkos device D; transformer.cpp
// instantiates <float, Device> and <double, Device>.
//
// Phases carry exa::ScopedRegion names (Kokkos profiling regions plus the
// per-phase timers): forward/embed, forward/attn, forward/ffn, forward/moe,
// forward/moe/router, forward/moe/experts, forward/moe/shared, forward/head,
// and the same under backward/.
#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/permute.hpp"
#include "kernels/rope.hpp"
#include "kernels/router.hpp"
#include "model/model_config.hpp"
#include "model/unit_hooks.hpp"
#include "model/weights.hpp"

namespace exa::model {

struct LossParts {
  double loss = 0;  // ce + aux + z
  double ce = 0;    // mean cross-entropy over the valid targets
  double aux = 0;   // load-balancing loss, aux_coef included, summed over MoE layers
  double z = 0;     // router z-loss, z_coef included, summed over MoE layers
};

// Routing statistics of one MoE layer on one micro-batch.
struct LayerRouting {
  std::int64_t layer = 0;
  std::vector<std::int64_t> routed;  // [E] assignments per expert before capacity dropping
  std::vector<std::int64_t> kept;    // [E] assignments per expert after dropping
  std::int64_t dropped = 0;          // tokens*k - sum(kept)
  // max_e routed_e / mean_e routed_e (1 = perfectly balanced).
  double imbalance() const;
};

struct ForwardResult {
  LossParts loss;
  std::int64_t n_tokens = 0;  // B*T
  std::int64_t n_valid = 0;   // targets >= 0 (the CE mean's denominator)
  std::vector<LayerRouting> routing;  // one per MoE layer, in layer order
  // Largest per-layer imbalance (1 when there are no MoE layers).
  double max_imbalance() const;
  // Mean over MoE layers of the per-layer imbalance (1 when none).
  double mean_imbalance() const;
};

struct ModelOptions {
  bool fence_phases = false;  // fence at the end of each phase so the timers charge device work correctly
  kernels::AttentionTiles attention_tiles{};
};

// Activations kept by the forward for the backward, per block. Everything
// here is recomputable from `x` (the block input) and the weights, which is
// what activation recomputation will exploit.
template <class T, class D = Device>
struct BlockCache {
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using V3 = Kokkos::View<T***, Layout, D>;
  using I1 = Kokkos::View<int*, Layout, D>;
  using I2 = Kokkos::View<int**, Layout, D>;

  // Attention sub-block.
  V2 x;          // block input (residual stream) [N,d]
  V1 attn_rstd;  // [N]
  V2 attn_xn;    // RMSNorm(x) [N,d]
  V2 q, k, v;    // projections, RoPE applied to q and k: [N,H*hd], [N,Hkv*hd], [N,Hkv*hd]
  V2 attn_o;     // attention output before wo [N,H*hd]
  V3 attn_lse;   // [B,H,T]
  // FFN sub-block.
  V2 x_mid;      // x + Attn(...) [N,d]
  V1 ffn_rstd;   // [N]
  V2 ffn_xn;     // RMSNorm(x_mid) [N,d]
  // Dense SwiGLU: a = xn w1^T, b = xn w3^T, h = silu(a) * b   [N,d_ff]
  V2 a, b, h;
  // MoE.
  V2 router_logits, probs;  // [N,E]
  V1 router_lse;            // [N]
  I2 topk;                  // [N,k]
  V2 gates;                 // [N,k]
  I1 counts;                // [E] routed (before dropping)
  kernels::PermutePlan<D> plan;
  V2 xp, ea, eb, eh, yp;    // permuted rows (first plan.rows of N*k): [.,d], [.,F] x3, [.,d]
  V3 sa, sb, sh;            // shared experts [S,N,F]
  kernels::RouterLosses router_losses;

  // Bytes held for the backward pass (the memory activation recomputation
  // would give back).
  std::size_t bytes() const {
    std::size_t n = 0;
    auto add = [&n](const auto& v) { n += v.span() * sizeof(typename std::decay_t<decltype(v)>::value_type); };
    for (const auto* v2 : {&x, &attn_xn, &q, &k, &v, &attn_o, &x_mid, &ffn_xn, &a, &b, &h, &router_logits, &probs,
                           &gates, &xp, &ea, &eb, &eh, &yp})
      add(*v2);
    for (const auto* v1 : {&attn_rstd, &ffn_rstd, &router_lse}) add(*v1);
    for (const auto* v3 : {&attn_lse, &sa, &sb, &sh}) add(*v3);
    add(topk);
    add(counts);
    add(plan.row_of);
    add(plan.token_of);
    return n;
  }
};

template <class T, class D = Device>
class Transformer {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using Tokens = Kokkos::View<const std::int32_t**, Layout, D>;  // [B,T], contiguous
  using W = Weights<T, D>;

  explicit Transformer(const ModelConfig& cfg, ModelOptions opt = {});

  const ModelConfig& config() const { return cfg_; }
  // Called at unit boundaries (unit_hooks.hpp); nullptr (default) = none.
  // Not owned.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks ? hooks : &no_unit_hooks(); }

  // Loss of the micro-batch inputs [B,T] -> targets [B,T] (target < 0:
  // ignored). Keeps the activations for backward(). B and T may change from
  // call to call (buffers are resized); T need not equal cfg.seq_len.
  ForwardResult forward(const W& w, const Tokens& inputs, const Tokens& targets);

  // grads += loss_scale * d(loss of the last forward)/d(weights).
  void backward(const W& w, const W& grads, double loss_scale = 1.0);

  // Evaluation: per-token cross-entropy (nats) into ce [B*T] (0 where the
  // target is ignored), no aux/z. Returns the sum and the count of valid
  // targets (mean = sum / count). Routing (and capacity) as in forward.
  kernels::CrossEntropySum eval(const W& w, const Tokens& inputs, const Tokens& targets, const V1& ce);

  // Generation: logits [B,V] of position pos (default T-1) of each sequence.
  // Causal, so tokens after pos do not influence them (with capacity_factor
  // > 0 they can, through expert capacity: generate with the dropless model).
  void next_logits(const W& w, const Tokens& inputs, const V2& out, std::int64_t pos = -1);

  // After forward(): the full logits [B*T,V] (row n = b*T + t). backward()
  // overwrites them with their gradient.
  V2 logits() const { return logits_; }
  // After forward(): the activations of block l.
  const BlockCache<T, D>& cache(std::int64_t l) const { return blocks_.at(static_cast<std::size_t>(l)); }
  // After forward(): the input of the final RMSNorm [N,d].
  V2 final_hidden() const { return h_final_; }
  // Bytes of activations kept for backward (every block's cache, the final
  // norm and the logits), for the memory report.
  std::size_t activation_bytes() const {
    std::size_t n = (h_final_.span() + hf_.span() + logits_.span() + rstd_f_.span() + ce_lse_.span()) * sizeof(T);
    for (const auto& c : blocks_) n += c.bytes();
    return n;
  }

 private:
  using I1 = Kokkos::View<const std::int32_t*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  void ensure_shape(std::int64_t B, std::int64_t Tn);
  I1 flat_tokens(const Tokens& t, const char* what) const;
  // Embedding and blocks; fills h_final_ and routing stats. Returns summed router losses.
  kernels::RouterLosses forward_body(const W& w, const I1& tok, std::vector<LayerRouting>* routing);
  void attn_forward(const LayerWeights<T, D>& lw, BlockCache<T, D>& c);
  void dense_forward(const LayerWeights<T, D>& lw, BlockCache<T, D>& c, const V2& out);
  void moe_forward(std::int64_t layer, const LayerWeights<T, D>& lw, BlockCache<T, D>& c, const V2& out,
                   std::vector<LayerRouting>* routing);
  void attn_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg, BlockCache<T, D>& c);
  void dense_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg, BlockCache<T, D>& c);
  void moe_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg, BlockCache<T, D>& c,
                    double loss_scale);
  void final_norm_forward(const W& w);

  ModelConfig cfg_;
  ModelOptions opt_;
  UnitHooks* hooks_ = &no_unit_hooks();
  std::int64_t B_ = 0, T_ = 0, N_ = 0;
  kernels::RopeTable<T, D> rope_;
  std::vector<BlockCache<T, D>> blocks_;
  V2 h_final_, hf_, logits_;  // final RMSNorm input / output [N,d], logits [N,V]
  V1 rstd_f_, ce_lse_;        // [N]
  // The last forward's tokens (copies: backward needs them for the embedding gradient and CE).
  Kokkos::View<std::int32_t*, Layout, D> tok_, tgt_;
  std::int64_t n_valid_ = 0;
  bool have_grad_state_ = false;
  // Backward scratch, shared by all layers.
  V2 dres_, dxn_, dq_, dk_, dv_, do_;       // [N,d] x2, [N,H*hd], [N,Hkv*hd] x2, [N,H*hd]
  V2 dda_, ddb_, ddh_;                      // dense [N,d_ff]
  V2 dyp_, dxp_, dea_, deb_, deh_;          // MoE permuted rows [N*k,d], [N*k,d], [N*k,F] x3
  V2 dsa_, dsb_, dsh_;                      // shared expert [N,F]
  V2 dgates_, drouter_;                     // [N,k], [N,E]
  V2 moe_y_;                                // forward scratch: routed output [N,d]
};

extern template class Transformer<float, Device>;
extern template class Transformer<double, Device>;

}  // namespace exa::model
