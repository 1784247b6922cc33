#pragma once
// The MoE FFN sub-block: out = x_mid + sum_j gates_j Expert_{topk_j}(xn)
// + sum_s Shared_s(xn), xn = RMSNorm(x_mid). The router (replicated) picks
// top-k experts in fp32; the TokenDispatcher seam moves tokens to their
// experts and back; shared experts are dense SwiGLUs every token passes
// through (column/row Linears like the dense MLP).
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/profiling.hpp"
#include "kernels/router.hpp"
#include "kernels/swiglu.hpp"
#include "model/activation_context.hpp"
#include "model/forward_result.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/scratch.hpp"
#include "model/model_config.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/seams/routing_scope.hpp"
#include "model/seams/token_dispatcher.hpp"
#include "model/weights.hpp"

namespace exa::model {

namespace moe_detail {
// out = a + b elementwise on [N,d] (a free function: CUDA extended lambdas
// may not live in private members). One pass where a copy then an add
// made two; contiguous views, the usual case, run as a flat loop that
// vectorises, others by (row, column).
template <class OV, class AV, class BV>
void residual_sum(const OV& out, const AV& a, const BV& b) {
  using Exec = exec_of<OV>;
  using T = typename OV::non_const_value_type;
  const index_t n = out.extent(0), d = out.extent(1);
  if (out.span_is_contiguous() && a.span_is_contiguous() && b.span_is_contiguous() &&
      std::is_same_v<typename OV::array_layout, typename AV::array_layout> &&
      std::is_same_v<typename OV::array_layout, typename BV::array_layout>) {
    T* po = out.data();
    const auto* pa = a.data();
    const auto* pb = b.data();
    Kokkos::parallel_for(
        "exa::model::residual_sum", Kokkos::RangePolicy<Exec>(0, n * d),
        KOKKOS_LAMBDA(const index_t i) { po[i] = pa[i] + pb[i]; });
    return;
  }
  Kokkos::parallel_for(
      "exa::model::residual_sum", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>({0, 0}, {n, d}),
      KOKKOS_LAMBDA(const index_t r, const index_t c) { out(r, c) = a(r, c) + b(r, c); });
}

// ps[e] = sum_n probs(n, e) (double).
template <class PV, class SV>
void column_sums(const PV& probs, const SV& ps) {
  using Exec = exec_of<PV>;
  const index_t n = probs.extent(0), E = probs.extent(1);
  Kokkos::parallel_for(
      "exa::model::router_prob_sums", Kokkos::RangePolicy<Exec>(0, E), KOKKOS_LAMBDA(const index_t e) {
        double acc = 0;
        for (index_t i = 0; i < n; ++i) acc += double(probs(i, e));
        ps(e) = acc;
      });
}

// canon(e): the lowest member of e's clone family (ring) whose router row
// equals e's bit for bit; e when none does (kernels/router.hpp).
template <class W, class R>
void clone_canon(const W& router, const R& ring, const R& canon) {
  const int E = static_cast<int>(router.extent(0));
  const index_t d = static_cast<index_t>(router.extent(1));
  Kokkos::parallel_for(
      "exa::moe::clone_canon", Kokkos::RangePolicy<exec_of<R>>(0, E), KOKKOS_LAMBDA(const int e) {
        int c = e;
        for (int f = ring(e); f != e; f = ring(f)) {
          if (f > c) continue;
          bool same = true;
          for (index_t i = 0; i < d && same; ++i) same = router(f, i) == router(e, i);
          if (same) c = f;
        }
        canon(e) = c;
      });
}

template <class V3>
auto mat(const V3& v, index_t i) {
  return Kokkos::subview(v, i, Kokkos::ALL, Kokkos::ALL);
}
// The same, or an empty matrix for an unbound (frozen) gradient.
template <class V3>
auto mat_or_empty(const V3& v, index_t i) {
  return v.data() == nullptr ? decltype(mat(v, i))() : mat(v, i);
}
}  // namespace moe_detail

struct MoeShape {
  std::int64_t n_experts = 0, top_k = 0;  // routing is over all experts, whoever holds them
  std::int64_t n_shared = 0;
  std::int64_t d_expert = 0;              // this rank's columns of each expert
  double capacity_factor = 0;             // 0 = dropless
  kernels::RouterOptions router;
};

template <class T, class D = Device>
class MoeBlock {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using LinearP = std::shared_ptr<const Linear<T, D>>;
  using Meanwhile = typename TokenDispatcher<T, D>::Meanwhile;

  MoeBlock(std::int64_t layer, MoeShape shape, double norm_eps, LinearP column, LinearP row, LinearP replicated,
           std::shared_ptr<TokenDispatcher<T, D>> dispatcher, bool fence, RowShare norm_grad_rows = {},
           RoutingScope scope = {})
      : layer_(layer),
        prefix_("layers." + std::to_string(layer) + "."),
        shape_(shape),
        norm_(prefix_ + "ffn_norm.weight", norm_eps, norm_grad_rows),
        column_(std::move(column)),
        row_(std::move(row)),
        router_(std::move(replicated)),
        dispatcher_(std::move(dispatcher)),
        fence_(fence),
        scope_(std::move(scope)) {}

  const MoeShape& shape() const { return shape_; }

  // The per-expert bias added to the routing scores for the top-k selection
  // only (aux-loss-free balancing; kernels/router.hpp). `bias` holds
  // n_experts values, or none to route without a bias (the default).
  void set_router_bias(const std::vector<float>& bias) {
    if (bias.empty()) {
      bias_ = V1();
      return;
    }
    EXA_REQUIRE(std::int64_t(bias.size()) == shape_.n_experts,
                "MoeBlock: layer {} has {} experts but its routing bias {} values", layer_, shape_.n_experts,
                bias.size());
    if (bias_.extent(0) == 0) bias_ = V1(prefix_ + "moe.router_bias", bias.size());
    const auto h = Kokkos::create_mirror_view(bias_);
    for (std::size_t e = 0; e < bias.size(); ++e) h(e) = static_cast<T>(bias[e]);
    Kokkos::deep_copy(bias_, h);
  }
  // Clone families after expert growth (kernels/router.hpp, `ring`): ring[e]
  // is the next expert of e's family; empty: no families (the default).
  void set_clone_ring(const std::vector<int>& ring) {
    if (ring.empty()) {
      ring_ = Kokkos::View<int*, Layout, D>();
      canon_ = Kokkos::View<int*, Layout, D>();
      return;
    }
    EXA_REQUIRE(std::int64_t(ring.size()) == shape_.n_experts,
                "MoeBlock: layer {} has {} experts but its clone ring {} entries", layer_, shape_.n_experts,
                ring.size());
    if (ring_.extent(0) == 0) {
      ring_ = Kokkos::View<int*, Layout, D>(prefix_ + "moe.clone_ring", ring.size());
      canon_ = Kokkos::View<int*, Layout, D>(prefix_ + "moe.clone_canon", ring.size());
    }
    const auto h = Kokkos::create_mirror_view(ring_);
    for (std::size_t e = 0; e < ring.size(); ++e) h(e) = ring[e];
    Kokkos::deep_copy(ring_, h);
  }
  std::vector<std::string> param_names() const {
    std::vector<std::string> n{norm_.param_name(), prefix_ + "moe.router.weight", prefix_ + "moe.experts.w1",
                               prefix_ + "moe.experts.w3", prefix_ + "moe.experts.w2"};
    if (shape_.n_shared > 0)
      for (const char* w : {"w1", "w3", "w2"}) n.push_back(prefix_ + "moe.shared." + w);
    return n;
  }

  // c.x_mid -> out. `moe_y` is scratch [N,d]. Appends the layer's routing
  // statistics when `routing` is given.
  void forward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const V2& out, const V2& moe_y,
               std::vector<LayerRouting>* routing) const {
    namespace K = kernels;
    ScopedRegion region("forward/moe", fence_);
    const std::int64_t N = c.router_logits.extent(0);  // every token (sequence parallelism: x_mid holds some)
    norm_.forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd);
    {
      ScopedRegion r("forward/moe/router", fence_);
      router_->forward(c.ffn_xn, lw.router, c.router_logits, false, lora::in(c, lw, lw.lora_router, 8));
      if (ring_.extent(0) > 0) moe_detail::clone_canon(lw.router, ring_, canon_);
      c.router_losses = K::router_forward(c.router_logits, bias_, ring_, canon_, shape_.router, c.probs,
                                          c.router_lse, c.topk, c.gates, c.counts);
      if (scope_.spans_ranks()) c.router_losses.aux = aux_over_scope(c, N);
    }
    using moe_detail::mat;
    // The shared experts' first products and SwiGLU need nothing of the
    // dispatch: the dispatcher runs them while its exchange travels
    // (TokenDispatcher::Meanwhile). Their output product adds into `out`
    // after the routed sum, as it always did, so the arithmetic is the same.
    const auto shared_front = [&] {
      ScopedRegion r("forward/moe/shared", fence_);
      for (index_t s = 0; s < shape_.n_shared; ++s) {
        const auto sa = mat(c.sa, s), sb = mat(c.sb, s), sh = mat(c.sh, s);
        column_->forward(c.ffn_xn, mat(lw.shared_w1, s), sa, false, lora::in(c, lw, lw.lora_shared_w1, s, 1001));
        column_->forward(c.ffn_xn, mat(lw.shared_w3, s), sb, false, lora::in(c, lw, lw.lora_shared_w3, s, 1003));
        K::swiglu_forward(sa, sb, sh);
      }
    };
    {
      ScopedRegion r("forward/moe/experts", fence_);
      auto cap = ModelConfig::capacity_for(shape_.capacity_factor, N, shape_.top_k, shape_.n_experts);
      if (cap > 0 && scope_.capacity_spans()) {
        keep_over_scope(c, N);
        cap = 0;  // the mask decides
      } else {
        c.capacity_keep = decltype(c.capacity_keep)();
      }
      c.exchange.layer = layer_;
      c.experts_used.assign(lw.w1.extent(0), 0);
      dispatcher_->forward(c, lw, cap, c.ffn_xn, moe_y, shape_.n_shared > 0 ? Meanwhile(shared_front) : Meanwhile());
      moe_detail::residual_sum(out, c.x_mid, moe_y);
    }
    if (shape_.n_shared > 0) {
      ScopedRegion r("forward/moe/shared", fence_);
      for (index_t s = 0; s < shape_.n_shared; ++s)
        row_->forward(mat(c.sh, s), mat(lw.shared_w2, s), out, /*accumulate=*/true,
                      lora::in(c, lw, lw.lora_shared_w2, s, 1002));
    }
    if (routing) routing->push_back(statistics(c, N));
  }

  // s.dres: d(loss)/d(out) on entry, d(loss)/d(x_mid) on return.
  void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                double loss_scale, LayerScratch<T, D>& s) const {
    namespace K = kernels;
    using moe_detail::mat;
    ScopedRegion region("backward/moe", fence_);
    // Shared expert e's output product and SwiGLU backward (into the
    // scratch dsh, dsa, dsb, one expert's at a time); the first expert's
    // run while the dispatcher's exchange travels, as in forward.
    const auto shared_back = [&](index_t e) {
      if (c.shared_cheap) K::swiglu_forward(mat(c.sa, e), mat(c.sb, e), mat(c.sh, e));
      row_->backward(mat(c.sh, e), mat(lw.shared_w2, e), s.dres, s.dsh, moe_detail::mat_or_empty(lg.shared_w2, e), false,
                     lora::in(c, lw, lw.lora_shared_w2, e, 1002, &lg.lora_shared_w2));
      K::swiglu_backward(mat(c.sa, e), mat(c.sb, e), s.dsh, s.dsa, s.dsb);
    };
    {
      ScopedRegion r("backward/moe/experts", fence_);
      const auto first_shared = [&] {
        ScopedRegion rs("backward/moe/shared", fence_);
        shared_back(0);
      };
      dispatcher_->backward(c, lw, lg, s.dres, s.dxn, s.dgates,
                            shape_.n_shared > 0 ? Meanwhile(first_shared) : Meanwhile());  // overwrites dxn
    }
    if (c.shared_cheap) norm_.forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd);  // selective recompute
    if (shape_.n_shared > 0) {
      ScopedRegion r("backward/moe/shared", fence_);
      for (index_t e = 0; e < shape_.n_shared; ++e) {
        if (e > 0) shared_back(e);
        column_->backward(c.ffn_xn, mat(lw.shared_w1, e), s.dsa, s.dxn, moe_detail::mat_or_empty(lg.shared_w1, e), true,
                          lora::in(c, lw, lw.lora_shared_w1, e, 1001, &lg.lora_shared_w1));
        column_->backward(c.ffn_xn, mat(lw.shared_w3, e), s.dsb, s.dxn, moe_detail::mat_or_empty(lg.shared_w3, e), true,
                          lora::in(c, lw, lw.lora_shared_w3, e, 1003, &lg.lora_shared_w3));
      }
    }
    {
      ScopedRegion r("backward/moe/router", fence_);
      const bool wide = scope_.spans_ranks();
      K::router_backward(s.dgates, c.probs, c.router_lse, c.topk, c.gates, wide ? c.scope_counts : c.counts,
                         shape_.router, loss_scale * (wide ? c.aux_grad_scale : 1.0), loss_scale, s.drouter);
      router_->backward(c.ffn_xn, lw.router, s.drouter, s.dxn, lg.router, /*accumulate_dx=*/true,
                        lora::in(c, lw, lw.lora_router, 8, &lg.lora_router));
    }
    norm_.backward(c.x_mid, lw.ffn_norm, c.ffn_rstd, s.dxn, s.dres, lg.ffn_norm, /*accumulate_dx=*/true);
  }

 private:
  // The aux loss with f_e from the counts summed over the scope's ranks
  // (C_e, over Ng tokens) and P_e from this rank's probability sums S_e:
  // R · aux_coef · E · Σ_e C_e S_e / (Ng² k). Its mean over the R ranks is
  // the aux loss of the whole micro-batch, and so is the mean of their
  // gradients (data parallelism averages over them). router_backward with
  // counts C_e and d(aux) scaled by R N² / Ng² gives exactly this gradient.
  double aux_over_scope(LayerContext<T, D>& c, std::int64_t N) const {
    const std::int64_t E = shape_.n_experts;
    Kokkos::View<double*, Layout, D> ps("exa::model::router_prob_sums", E);
    moe_detail::column_sums(c.probs, ps);
    const auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ps);
    const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.counts);
    std::vector<double> v(static_cast<std::size_t>(E + 1));
    for (std::int64_t e = 0; e < E; ++e) v[e] = double(hc(e));
    v[E] = double(N);
    scope_.sum(v);
    const double ng = v[E], R = scope_.ranks;
    if (c.scope_counts.extent(0) != std::size_t(E))
      c.scope_counts = typename LayerContext<T, D>::I1("exa::model::scope_counts", E);
    const auto hs = Kokkos::create_mirror_view(c.scope_counts);
    double fp = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      hs(e) = static_cast<int>(v[e]);
      fp += v[e] * hp(e);
    }
    Kokkos::deep_copy(c.scope_counts, hs);
    c.aux_grad_scale = ng > 0 ? R * double(N) * double(N) / (ng * ng) : 0.0;
    return ng > 0 ? R * shape_.router.aux_coef * double(E) * fp / (ng * ng * double(shape_.top_k)) : 0.0;
  }

  // moe.capacity_scope = "sequence" (RoutingScope): c.capacity_keep from
  // every rank's assignments per (sequence, zigzag chunk, expert), so that
  // an assignment is kept when fewer than the whole micro-batch's capacity
  // precede it in the sequences' token order, as on one rank.
  void keep_over_scope(LayerContext<T, D>& c, std::int64_t N) const {
    const int K = static_cast<int>(shape_.top_k), E = static_cast<int>(shape_.n_experts);
    const int R = scope_.ranks, r = scope_.rank;
    const std::int64_t Tl = scope_.rows_per_sequence, Tc = Tl / 2;
    EXA_REQUIRE(Tl > 0 && Tl % 2 == 0 && N % Tl == 0,
                "MoeBlock: capacity over the sequence needs whole zigzag chunks ({} rows, {} per sequence)", N, Tl);
    const std::int64_t B = N / Tl, G = 2 * std::int64_t(R);
    const auto topk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.topk);
    auto chunk_of = [&](std::int64_t a) { return a == 0 ? std::int64_t(r) : G - 1 - r; };
    std::vector<double> v(std::size_t(B * G * E), 0.0);  // assignments per (sequence, chunk, expert)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t b = n / Tl, g = chunk_of((n % Tl) / Tc);
      for (int j = 0; j < K; ++j) v[std::size_t((b * G + g) * E + topk(n, j))] += 1.0;
    }
    scope_.sum(v);
    const std::int64_t cap = ModelConfig::capacity_for(shape_.capacity_factor, N * R, K, E);
    // prefix[(b, g)][e]: assignments to e before chunk g of sequence b.
    std::vector<std::int64_t> prefix(v.size()), run(std::size_t(E), 0);
    for (std::int64_t bg = 0; bg < B * G; ++bg)
      for (int e = 0; e < E; ++e) {
        prefix[std::size_t(bg * E + e)] = run[std::size_t(e)];
        run[std::size_t(e)] += std::int64_t(v[std::size_t(bg * E + e)]);
      }
    if (c.capacity_keep.extent(0) != std::size_t(N) || c.capacity_keep.extent(1) != std::size_t(K))
      c.capacity_keep = decltype(c.capacity_keep)(prefix_ + "moe.capacity_keep", N, K);
    const auto keep = Kokkos::create_mirror_view(c.capacity_keep);
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t b = n / Tl, g = chunk_of((n % Tl) / Tc);
      if (n % Tc == 0) std::copy_n(prefix.begin() + (b * G + g) * E, E, run.begin());  // a chunk starts
      for (int j = 0; j < K; ++j) keep(n, j) = run[std::size_t(topk(n, j))]++ < cap ? 1 : 0;
    }
    Kokkos::deep_copy(c.capacity_keep, keep);
  }

  LayerRouting statistics(const LayerContext<T, D>& c, std::int64_t N) const {
    LayerRouting lr;
    lr.layer = layer_;
    const auto routed = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.counts);
    const auto kept = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.plan.counts);
    std::int64_t total_kept = 0;
    // Under expert re-placement the plan counts by physical slot.
    const auto& slot = c.exchange.slot_of;
    for (std::int64_t e = 0; e < shape_.n_experts; ++e) {
      const std::int64_t k = kept(slot.empty() ? e : slot[std::size_t(e)]);
      lr.routed.push_back(routed(e));
      lr.kept.push_back(k);
      total_kept += k;
    }
    lr.dropped = N * shape_.top_k - total_kept;
    return lr;
  }

  std::int64_t layer_;
  std::string prefix_;
  MoeShape shape_;
  RMSNorm<T, D> norm_;
  LinearP column_, row_, router_;
  std::shared_ptr<TokenDispatcher<T, D>> dispatcher_;
  bool fence_;
  RoutingScope scope_;
  V1 bias_;  // empty: no routing bias
  Kokkos::View<int*, Layout, D> ring_;   // empty: no clone families
  Kokkos::View<int*, Layout, D> canon_;  // per forward: each expert's lowest identical family member
};

}  // namespace exa::model
