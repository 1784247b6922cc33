#pragma once
// Template definitions of Transformer<T, D> (transformer.hpp). Included by
// transformer.cpp, which instantiates <float, Device> and <double, Device>;
// include it directly only to instantiate another (T, D).
#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/permute.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/router.hpp"
#include "kernels/swiglu.hpp"
#include "model/transformer.hpp"

namespace exa::model {

namespace transformer_detail {

// y += x, elementwise on [N,d].
template <class YV, class XV>
void add_inplace(const YV& y, const XV& x) {
  using Exec = exec_of<YV>;
  const index_t n = y.extent(0), d = y.extent(1);
  EXA_ASSERT(index_t(x.extent(0)) == n && index_t(x.extent(1)) == d);
  Kokkos::parallel_for(
      "exa::model::add_inplace", Kokkos::RangePolicy<Exec>(0, n * d), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / d, c = i % d;
        y(r, c) += x(r, c);
      });
}

// dst[b,:] = src[b*T + pos, :]
template <class SV, class DV>
void gather_position(const SV& src, index_t Tn, index_t pos, const DV& dst) {
  using Exec = exec_of<DV>;
  const index_t nb = dst.extent(0), d = dst.extent(1);
  Kokkos::parallel_for(
      "exa::model::gather_position", Kokkos::RangePolicy<Exec>(0, nb * d), KOKKOS_LAMBDA(const index_t i) {
        const index_t b = i / d, c = i % d;
        dst(b, c) = src(b * Tn + pos, c);
      });
}

// Number of ids outside [lo, hi).
template <class IV>
index_t count_out_of_range(const IV& ids, index_t lo, index_t hi) {
  using Exec = exec_of<IV>;
  index_t bad = 0;
  Kokkos::parallel_reduce(
      "exa::model::check_tokens", Kokkos::RangePolicy<Exec>(0, ids.extent(0)),
      KOKKOS_LAMBDA(const index_t n, index_t& acc) { acc += (ids(n) < lo || ids(n) >= hi) ? 1 : 0; }, bad);
  return bad;
}

template <class V>
double sum_of(const V& v) {
  using Exec = exec_of<V>;
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::model::sum", Kokkos::RangePolicy<Exec>(0, v.extent(0)),
      KOKKOS_LAMBDA(const index_t n, double& acc) { acc += double(v(n)); }, s);
  return s;
}

template <class V3>
auto mat(const V3& v, index_t i) {
  return Kokkos::subview(v, i, Kokkos::ALL, Kokkos::ALL);
}

inline std::vector<index_t> host_offsets(const Kokkos::View<index_t*, Layout, Kokkos::HostSpace>& o) {
  return std::vector<index_t>(o.data(), o.data() + o.extent(0));
}

}  // namespace transformer_detail

template <class T, class D>
Transformer<T, D>::Transformer(const ModelConfig& cfg, ModelOptions opt) : cfg_(cfg), opt_(opt) {
  EXA_REQUIRE(cfg_.n_heads > 0 && cfg_.d_model % cfg_.n_heads == 0,
              "Transformer: d_model {} is not a multiple of n_heads {}", cfg_.d_model, cfg_.n_heads);
  EXA_REQUIRE(cfg_.n_kv_heads > 0 && cfg_.n_heads % cfg_.n_kv_heads == 0,
              "Transformer: n_heads {} is not a multiple of n_kv_heads {}", cfg_.n_heads, cfg_.n_kv_heads);
  EXA_REQUIRE(cfg_.head_dim() % 2 == 0, "Transformer: head dim {} must be even for RoPE", cfg_.head_dim());
  bool any_moe = false;
  for (std::int64_t i = 0; i < cfg_.n_layers; ++i) any_moe = any_moe || cfg_.is_moe_layer(i);
  if (any_moe)
    EXA_REQUIRE(cfg_.top_k >= 1 && cfg_.top_k <= cfg_.n_experts,
                "Transformer: top_k {} must be in [1, n_experts = {}]", cfg_.top_k, cfg_.n_experts);
  blocks_.resize(static_cast<std::size_t>(cfg_.n_layers));
}

template <class T, class D>
void Transformer<T, D>::ensure_shape(std::int64_t B, std::int64_t Tn) {
  EXA_REQUIRE(B > 0 && Tn > 0, "Transformer: empty micro-batch [{}, {}]", B, Tn);
  if (B == B_ && Tn == T_) return;
  B_ = B;
  T_ = Tn;
  N_ = B * Tn;
  const std::int64_t N = N_, d = cfg_.d_model, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim(),
                     E = cfg_.n_experts, K = cfg_.top_k, F = cfg_.d_expert, S = cfg_.n_shared_experts,
                     Fd = cfg_.d_ff, V = cfg_.vocab_size;
  auto v1 = [](const char* l, std::int64_t a) { return V1(std::string("exa::model::") + l, a); };
  auto v2 = [](const char* l, std::int64_t a, std::int64_t b) { return V2(std::string("exa::model::") + l, a, b); };
  using V3 = typename BlockCache<T, D>::V3;
  auto v3 = [](const char* l, std::int64_t a, std::int64_t b, std::int64_t c) {
    return V3(std::string("exa::model::") + l, a, b, c);
  };
  if (rope_.max_pos() < Tn) rope_ = kernels::make_rope_table<T, D>(Tn, hd, cfg_.rope_theta);
  bool any_moe = false, any_dense = false;
  for (std::int64_t i = 0; i < cfg_.n_layers; ++i) {
    auto& c = blocks_[static_cast<std::size_t>(i)];
    c = BlockCache<T, D>{};
    c.x = v2("x", N, d);
    c.attn_rstd = v1("attn_rstd", N);
    c.attn_xn = v2("attn_xn", N, d);
    c.q = v2("q", N, H * hd);
    c.k = v2("k", N, Hkv * hd);
    c.v = v2("v", N, Hkv * hd);
    c.attn_o = v2("attn_o", N, H * hd);
    c.attn_lse = v3("attn_lse", B, H, Tn);
    c.x_mid = v2("x_mid", N, d);
    c.ffn_rstd = v1("ffn_rstd", N);
    c.ffn_xn = v2("ffn_xn", N, d);
    if (cfg_.is_moe_layer(i)) {
      any_moe = true;
      c.router_logits = v2("router_logits", N, E);
      c.probs = v2("router_probs", N, E);
      c.router_lse = v1("router_lse", N);
      c.topk = typename BlockCache<T, D>::I2("exa::model::topk", N, K);
      c.gates = v2("gates", N, K);
      c.counts = typename BlockCache<T, D>::I1("exa::model::counts", E);
      c.xp = v2("xp", N * K, d);
      c.ea = v2("ea", N * K, F);
      c.eb = v2("eb", N * K, F);
      c.eh = v2("eh", N * K, F);
      c.yp = v2("yp", N * K, d);
      if (S > 0) {
        c.sa = v3("sa", S, N, F);
        c.sb = v3("sb", S, N, F);
        c.sh = v3("sh", S, N, F);
      }
    } else {
      any_dense = true;
      c.a = v2("a", N, Fd);
      c.b = v2("b", N, Fd);
      c.h = v2("h", N, Fd);
    }
  }
  h_final_ = v2("h_final", N, d);
  hf_ = v2("hf", N, d);
  logits_ = v2("logits", N, V);
  rstd_f_ = v1("rstd_final", N);
  ce_lse_ = v1("ce_lse", N);
  tok_ = Kokkos::View<std::int32_t*, Layout, D>("exa::model::tokens", N);
  tgt_ = Kokkos::View<std::int32_t*, Layout, D>("exa::model::targets", N);
  dres_ = v2("dres", N, d);
  dxn_ = v2("dxn", N, d);
  dq_ = v2("dq", N, H * hd);
  dk_ = v2("dk", N, Hkv * hd);
  dv_ = v2("dv", N, Hkv * hd);
  do_ = v2("do", N, H * hd);
  dda_ = ddb_ = ddh_ = V2();
  dyp_ = dxp_ = dea_ = deb_ = deh_ = dsa_ = dsb_ = dsh_ = dgates_ = drouter_ = moe_y_ = V2();
  if (any_dense) {
    dda_ = v2("dda", N, Fd);
    ddb_ = v2("ddb", N, Fd);
    ddh_ = v2("ddh", N, Fd);
  }
  if (any_moe) {
    dyp_ = v2("dyp", N * K, d);
    dxp_ = v2("dxp", N * K, d);
    dea_ = v2("dea", N * K, F);
    deb_ = v2("deb", N * K, F);
    deh_ = v2("deh", N * K, F);
    dgates_ = v2("dgates", N, K);
    drouter_ = v2("drouter", N, E);
    moe_y_ = v2("moe_y", N, d);
    if (S > 0) {
      dsa_ = v2("dsa", N, F);
      dsb_ = v2("dsb", N, F);
      dsh_ = v2("dsh", N, F);
    }
  }
  have_grad_state_ = false;
}

template <class T, class D>
typename Transformer<T, D>::I1 Transformer<T, D>::flat_tokens(const Tokens& t, const char* what) const {
  EXA_REQUIRE(t.span_is_contiguous(), "Transformer: {} must be a contiguous [B,T] array", what);
  return I1(t.data(), t.extent(0) * t.extent(1));
}

template <class T, class D>
void Transformer<T, D>::attn_forward(const LayerWeights<T, D>& lw, BlockCache<T, D>& c) {
  namespace K = kernels;
  ScopedRegion region("forward/attn", opt_.fence_phases);
  const index_t H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim();
  K::rmsnorm_forward(c.x, lw.attn_norm, c.attn_xn, c.attn_rstd, cfg_.norm_eps);
  K::linear_forward(c.attn_xn, lw.wq, c.q);
  K::linear_forward(c.attn_xn, lw.wk, c.k);
  K::linear_forward(c.attn_xn, lw.wv, c.v);
  const auto q4 = K::view_as_bthd(c.q, B_, T_, H, hd);
  const auto k4 = K::view_as_bthd(c.k, B_, T_, Hkv, hd);
  const auto v4 = K::view_as_bthd(c.v, B_, T_, Hkv, hd);
  const auto o4 = K::view_as_bthd(c.attn_o, B_, T_, H, hd);
  K::rope_forward(q4, rope_);
  K::rope_forward(k4, rope_);
  K::attention_forward(q4, k4, v4, o4, c.attn_lse, opt_.attention_tiles);
  Kokkos::deep_copy(c.x_mid, c.x);
  K::linear_forward(c.attn_o, lw.wo, c.x_mid, /*accumulate=*/true);
}

template <class T, class D>
void Transformer<T, D>::dense_forward(const LayerWeights<T, D>& lw, BlockCache<T, D>& c, const V2& out) {
  namespace K = kernels;
  ScopedRegion region("forward/ffn", opt_.fence_phases);
  K::rmsnorm_forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd, cfg_.norm_eps);
  K::linear_forward(c.ffn_xn, lw.mlp_w1, c.a);
  K::linear_forward(c.ffn_xn, lw.mlp_w3, c.b);
  K::swiglu_forward(c.a, c.b, c.h);
  Kokkos::deep_copy(out, c.x_mid);
  K::linear_forward(c.h, lw.mlp_w2, out, /*accumulate=*/true);
}

template <class T, class D>
void Transformer<T, D>::moe_forward(std::int64_t layer, const LayerWeights<T, D>& lw, BlockCache<T, D>& c,
                                    const V2& out, std::vector<LayerRouting>* routing) {
  namespace K = kernels;
  namespace td = transformer_detail;
  ScopedRegion region("forward/moe", opt_.fence_phases);
  const int E = static_cast<int>(cfg_.n_experts);
  K::rmsnorm_forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd, cfg_.norm_eps);
  {
    ScopedRegion r("forward/moe/router", opt_.fence_phases);
    K::linear_forward(c.ffn_xn, lw.router, c.router_logits);
    const K::RouterOptions ro{cfg_.norm_topk, cfg_.aux_coef, cfg_.z_coef};
    c.router_losses = K::router_forward(c.router_logits, ro, c.probs, c.router_lse, c.topk, c.gates, c.counts);
    c.plan = K::permute_plan(c.topk, E, cfg_.expert_capacity(N_));
  }
  {
    ScopedRegion r("forward/moe/experts", opt_.fence_phases);
    const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
    const auto xp = Kokkos::subview(c.xp, rows, Kokkos::ALL);
    const auto ea = Kokkos::subview(c.ea, rows, Kokkos::ALL);
    const auto eb = Kokkos::subview(c.eb, rows, Kokkos::ALL);
    const auto eh = Kokkos::subview(c.eh, rows, Kokkos::ALL);
    const auto yp = Kokkos::subview(c.yp, rows, Kokkos::ALL);
    const auto off = td::host_offsets(c.plan.offsets_host);
    K::permute_forward(c.ffn_xn, c.plan.token_of, xp);
    K::grouped_linear_forward(xp, lw.w1, off, ea);
    K::grouped_linear_forward(xp, lw.w3, off, eb);
    K::swiglu_forward(ea, eb, eh);
    K::grouped_linear_forward(eh, lw.w2, off, yp);
    K::unpermute_forward(yp, c.gates, c.plan.row_of, moe_y_);
    Kokkos::deep_copy(out, c.x_mid);
    td::add_inplace(out, moe_y_);
  }
  if (cfg_.n_shared_experts > 0) {
    ScopedRegion r("forward/moe/shared", opt_.fence_phases);
    for (index_t s = 0; s < cfg_.n_shared_experts; ++s) {
      const auto sa = td::mat(c.sa, s), sb = td::mat(c.sb, s), sh = td::mat(c.sh, s);
      K::linear_forward(c.ffn_xn, td::mat(lw.shared_w1, s), sa);
      K::linear_forward(c.ffn_xn, td::mat(lw.shared_w3, s), sb);
      K::swiglu_forward(sa, sb, sh);
      K::linear_forward(sh, td::mat(lw.shared_w2, s), out, /*accumulate=*/true);
    }
  }
  if (routing) {
    LayerRouting lr;
    lr.layer = layer;
    const auto routed = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.counts);
    const auto kept = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.plan.counts);
    std::int64_t total_kept = 0;
    for (int e = 0; e < E; ++e) {
      lr.routed.push_back(routed(e));
      lr.kept.push_back(kept(e));
      total_kept += kept(e);
    }
    lr.dropped = N_ * cfg_.top_k - total_kept;
    routing->push_back(std::move(lr));
  }
}

template <class T, class D>
kernels::RouterLosses Transformer<T, D>::forward_body(const W& w, const I1& tok,
                                                      std::vector<LayerRouting>* routing) {
  EXA_REQUIRE(std::int64_t(w.layers.size()) == cfg_.n_layers, "Transformer: weights have {} layers, the model {}",
              w.layers.size(), cfg_.n_layers);
  {
    hooks_->before_forward(0);
    ScopedRegion region("forward/embed", opt_.fence_phases);
    Kokkos::deep_copy(tok_, tok);
    const index_t bad = transformer_detail::count_out_of_range(tok_, 0, cfg_.vocab_size);
    EXA_REQUIRE(bad == 0, "Transformer: {} input tokens lie outside the vocabulary [0, {})", bad, cfg_.vocab_size);
    kernels::embedding_forward(w.embed, tok_, blocks_.empty() ? h_final_ : blocks_[0].x);
  }
  kernels::RouterLosses sum;
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    auto& c = blocks_[l];
    const auto& lw = w.layers[l];
    hooks_->before_forward(static_cast<int>(l) + 1);
    EXA_REQUIRE(lw.moe == cfg_.is_moe_layer(std::int64_t(l)), "Transformer: weights of layer {} are {} but the "
                "model's layer is {}", l, lw.moe ? "MoE" : "dense", lw.moe ? "dense" : "MoE");
    attn_forward(lw, c);
    const V2 out = l + 1 < blocks_.size() ? blocks_[l + 1].x : h_final_;
    if (lw.moe) {
      moe_forward(std::int64_t(l), lw, c, out, routing);
      sum.aux += c.router_losses.aux;
      sum.z += c.router_losses.z;
    } else {
      dense_forward(lw, c, out);
    }
  }
  return sum;
}

template <class T, class D>
void Transformer<T, D>::final_norm_forward(const W& w) {
  hooks_->before_forward(static_cast<int>(cfg_.n_layers) + 1);
  kernels::rmsnorm_forward(h_final_, w.norm, hf_, rstd_f_, cfg_.norm_eps);
  kernels::linear_forward(hf_, w.lm_head, logits_);
}

template <class T, class D>
ForwardResult Transformer<T, D>::forward(const W& w, const Tokens& inputs, const Tokens& targets) {
  EXA_REQUIRE(inputs.extent(0) == targets.extent(0) && inputs.extent(1) == targets.extent(1),
              "Transformer::forward: inputs [{}, {}] and targets [{}, {}] differ in shape", inputs.extent(0),
              inputs.extent(1), targets.extent(0), targets.extent(1));
  have_grad_state_ = false;
  ensure_shape(inputs.extent(0), inputs.extent(1));
  ForwardResult res;
  res.n_tokens = N_;
  const auto rl = forward_body(w, flat_tokens(inputs, "inputs"), &res.routing);
  {
    ScopedRegion region("forward/head", opt_.fence_phases);
    Kokkos::deep_copy(tgt_, flat_tokens(targets, "targets"));
    const index_t bad = transformer_detail::count_out_of_range(tgt_, -0x7fffffff, cfg_.vocab_size);
    EXA_REQUIRE(bad == 0, "Transformer: {} targets are >= the vocabulary size {}", bad, cfg_.vocab_size);
    final_norm_forward(w);
    const auto ce = kernels::cross_entropy_forward_sum(logits_, tgt_, ce_lse_);
    n_valid_ = ce.n_valid;
    res.n_valid = ce.n_valid;
    res.loss.ce = ce.mean();
  }
  res.loss.aux = rl.aux;
  res.loss.z = rl.z;
  res.loss.loss = res.loss.ce + res.loss.aux + res.loss.z;
  have_grad_state_ = true;
  return res;
}

template <class T, class D>
void Transformer<T, D>::attn_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                                      BlockCache<T, D>& c) {
  namespace K = kernels;
  ScopedRegion region("backward/attn", opt_.fence_phases);
  const index_t H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim();
  // dres holds d(loss)/d(x_mid); x_mid = x + o wo^T.
  K::linear_backward(c.attn_o, lw.wo, dres_, do_, lg.wo, /*accumulate_dW=*/true);
  const auto q4 = K::view_as_bthd(c.q, B_, T_, H, hd);
  const auto k4 = K::view_as_bthd(c.k, B_, T_, Hkv, hd);
  const auto v4 = K::view_as_bthd(c.v, B_, T_, Hkv, hd);
  const auto o4 = K::view_as_bthd(c.attn_o, B_, T_, H, hd);
  const auto do4 = K::view_as_bthd(do_, B_, T_, H, hd);
  const auto dq4 = K::view_as_bthd(dq_, B_, T_, H, hd);
  const auto dk4 = K::view_as_bthd(dk_, B_, T_, Hkv, hd);
  const auto dv4 = K::view_as_bthd(dv_, B_, T_, Hkv, hd);
  K::attention_backward(do4, q4, k4, v4, o4, c.attn_lse, dq4, dk4, dv4, opt_.attention_tiles);
  K::rope_backward(dq4, rope_);
  K::rope_backward(dk4, rope_);
  K::linear_backward(c.attn_xn, lw.wq, dq_, dxn_, lg.wq, true, /*accumulate_dx=*/false);
  K::linear_backward(c.attn_xn, lw.wk, dk_, dxn_, lg.wk, true, /*accumulate_dx=*/true);
  K::linear_backward(c.attn_xn, lw.wv, dv_, dxn_, lg.wv, true, /*accumulate_dx=*/true);
  // dres += d/dx of RMSNorm: now d(loss)/d(x).
  K::rmsnorm_backward(c.x, lw.attn_norm, c.attn_rstd, dxn_, dres_, lg.attn_norm, true, /*accumulate_dx=*/true);
}

template <class T, class D>
void Transformer<T, D>::dense_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                                       BlockCache<T, D>& c) {
  namespace K = kernels;
  ScopedRegion region("backward/ffn", opt_.fence_phases);
  K::linear_backward(c.h, lw.mlp_w2, dres_, ddh_, lg.mlp_w2, true);
  K::swiglu_backward(c.a, c.b, ddh_, dda_, ddb_);
  K::linear_backward(c.ffn_xn, lw.mlp_w1, dda_, dxn_, lg.mlp_w1, true, false);
  K::linear_backward(c.ffn_xn, lw.mlp_w3, ddb_, dxn_, lg.mlp_w3, true, true);
  K::rmsnorm_backward(c.x_mid, lw.ffn_norm, c.ffn_rstd, dxn_, dres_, lg.ffn_norm, true, true);
}

template <class T, class D>
void Transformer<T, D>::moe_backward(const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                                     BlockCache<T, D>& c, double loss_scale) {
  namespace K = kernels;
  namespace td = transformer_detail;
  ScopedRegion region("backward/moe", opt_.fence_phases);
  {
    ScopedRegion r("backward/moe/experts", opt_.fence_phases);
    const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
    const auto xp = Kokkos::subview(c.xp, rows, Kokkos::ALL);
    const auto ea = Kokkos::subview(c.ea, rows, Kokkos::ALL);
    const auto eb = Kokkos::subview(c.eb, rows, Kokkos::ALL);
    const auto eh = Kokkos::subview(c.eh, rows, Kokkos::ALL);
    const auto yp = Kokkos::subview(c.yp, rows, Kokkos::ALL);
    const auto dyp = Kokkos::subview(dyp_, rows, Kokkos::ALL);
    const auto dxp = Kokkos::subview(dxp_, rows, Kokkos::ALL);
    const auto dea = Kokkos::subview(dea_, rows, Kokkos::ALL);
    const auto deb = Kokkos::subview(deb_, rows, Kokkos::ALL);
    const auto deh = Kokkos::subview(deh_, rows, Kokkos::ALL);
    const auto off = td::host_offsets(c.plan.offsets_host);
    K::unpermute_backward(dres_, yp, c.gates, c.plan.row_of, dyp, dgates_);
    K::grouped_linear_backward(eh, lw.w2, dyp, off, deh, lg.w2, true);
    K::swiglu_backward(ea, eb, deh, dea, deb);
    K::grouped_linear_backward(xp, lw.w1, dea, off, dxp, lg.w1, true, false);
    K::grouped_linear_backward(xp, lw.w3, deb, off, dxp, lg.w3, true, true);
    K::permute_backward(dxp, c.plan.row_of, dxn_);  // overwrites dxn
  }
  if (cfg_.n_shared_experts > 0) {
    ScopedRegion r("backward/moe/shared", opt_.fence_phases);
    for (index_t s = 0; s < cfg_.n_shared_experts; ++s) {
      K::linear_backward(td::mat(c.sh, s), td::mat(lw.shared_w2, s), dres_, dsh_, td::mat(lg.shared_w2, s), true);
      K::swiglu_backward(td::mat(c.sa, s), td::mat(c.sb, s), dsh_, dsa_, dsb_);
      K::linear_backward(c.ffn_xn, td::mat(lw.shared_w1, s), dsa_, dxn_, td::mat(lg.shared_w1, s), true, true);
      K::linear_backward(c.ffn_xn, td::mat(lw.shared_w3, s), dsb_, dxn_, td::mat(lg.shared_w3, s), true, true);
    }
  }
  {
    ScopedRegion r("backward/moe/router", opt_.fence_phases);
    const K::RouterOptions ro{cfg_.norm_topk, cfg_.aux_coef, cfg_.z_coef};
    K::router_backward(dgates_, c.probs, c.router_lse, c.topk, c.gates, c.counts, ro, loss_scale, loss_scale,
                       drouter_);
    K::linear_backward(c.ffn_xn, lw.router, drouter_, dxn_, lg.router, true, true);
  }
  K::rmsnorm_backward(c.x_mid, lw.ffn_norm, c.ffn_rstd, dxn_, dres_, lg.ffn_norm, true, true);
}

template <class T, class D>
void Transformer<T, D>::backward(const W& w, const W& g, double loss_scale) {
  namespace K = kernels;
  EXA_REQUIRE(have_grad_state_, "Transformer::backward needs the activations of a preceding forward() "
              "(eval() and next_logits() do not keep them, and backward() consumes them)");
  EXA_REQUIRE(g.layers.size() == w.layers.size() && std::int64_t(w.layers.size()) == cfg_.n_layers,
              "Transformer::backward: weights and gradients have {} and {} layers, the model {}", w.layers.size(),
              g.layers.size(), cfg_.n_layers);
  have_grad_state_ = false;
  const int head = static_cast<int>(cfg_.n_layers) + 1;
  hooks_->before_backward(head);
  {
    ScopedRegion region("backward/head", opt_.fence_phases);
    // logits_ becomes d(loss)/d(logits) in place.
    K::cross_entropy_backward(logits_, tgt_, ce_lse_, loss_scale, n_valid_, logits_);
    K::linear_backward(hf_, w.lm_head, logits_, dxn_, g.lm_head, /*accumulate_dW=*/true);
    K::rmsnorm_backward(h_final_, w.norm, rstd_f_, dxn_, dres_, g.norm, true, /*accumulate_dx=*/false);
  }
  hooks_->after_backward(head);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    auto& c = blocks_[l];
    hooks_->before_backward(static_cast<int>(l) + 1);
    if (w.layers[l].moe)
      moe_backward(w.layers[l], g.layers[l], c, loss_scale);
    else
      dense_backward(w.layers[l], g.layers[l], c);
    attn_backward(w.layers[l], g.layers[l], c);
    hooks_->after_backward(static_cast<int>(l) + 1);
  }
  hooks_->before_backward(0);
  {
    ScopedRegion region("backward/embed", opt_.fence_phases);
    K::embedding_backward(tok_, dres_, g.embed, /*accumulate=*/true);
  }
  hooks_->after_backward(0);
}

template <class T, class D>
kernels::CrossEntropySum Transformer<T, D>::eval(const W& w, const Tokens& inputs, const Tokens& targets,
                                                 const V1& ce) {
  EXA_REQUIRE(inputs.extent(0) == targets.extent(0) && inputs.extent(1) == targets.extent(1),
              "Transformer::eval: inputs [{}, {}] and targets [{}, {}] differ in shape", inputs.extent(0),
              inputs.extent(1), targets.extent(0), targets.extent(1));
  have_grad_state_ = false;
  ensure_shape(inputs.extent(0), inputs.extent(1));
  EXA_REQUIRE(std::int64_t(ce.extent(0)) == N_, "Transformer::eval: ce has {} entries, the batch {} tokens",
              ce.extent(0), N_);
  forward_body(w, flat_tokens(inputs, "inputs"), nullptr);
  ScopedRegion region("forward/head", opt_.fence_phases);
  Kokkos::deep_copy(tgt_, flat_tokens(targets, "targets"));
  const index_t bad = transformer_detail::count_out_of_range(tgt_, -0x7fffffff, cfg_.vocab_size);
  EXA_REQUIRE(bad == 0, "Transformer: {} targets are >= the vocabulary size {}", bad, cfg_.vocab_size);
  final_norm_forward(w);
  kernels::cross_entropy_rows(logits_, tgt_, ce_lse_, ce);
  kernels::CrossEntropySum s;
  s.loss_sum = transformer_detail::sum_of(ce);
  s.n_valid = N_ - transformer_detail::count_out_of_range(tgt_, 0, cfg_.vocab_size);  // targets < 0 are ignored
  return s;
}

template <class T, class D>
void Transformer<T, D>::next_logits(const W& w, const Tokens& inputs, const V2& out, std::int64_t pos) {
  have_grad_state_ = false;
  const std::int64_t B = inputs.extent(0), Tn = inputs.extent(1);
  if (pos < 0) pos = Tn - 1;
  EXA_REQUIRE(pos < Tn, "Transformer::next_logits: position {} is beyond the {} tokens given", pos, Tn);
  EXA_REQUIRE(std::int64_t(out.extent(0)) == B && std::int64_t(out.extent(1)) == cfg_.vocab_size,
              "Transformer::next_logits: out is {}x{}, expected {}x{}", out.extent(0), out.extent(1), B,
              cfg_.vocab_size);
  ensure_shape(B, Tn);
  forward_body(w, flat_tokens(inputs, "inputs"), nullptr);
  ScopedRegion region("forward/head", opt_.fence_phases);
  V2 h("exa::model::next_h", B, cfg_.d_model), hn("exa::model::next_hn", B, cfg_.d_model);
  V1 rstd("exa::model::next_rstd", B);
  transformer_detail::gather_position(h_final_, Tn, pos, h);
  hooks_->before_forward(static_cast<int>(cfg_.n_layers) + 1);
  kernels::rmsnorm_forward(h, w.norm, hn, rstd, cfg_.norm_eps);
  kernels::linear_forward(hn, w.lm_head, out);
}

}  // namespace exa::model
