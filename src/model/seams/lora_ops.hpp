#pragma once
// The low-rank adapter of a projection (docs/architecture.md, "LoRA"):
// y = x W^T + s (x A^T) B^T with A [r, in], B [out, r], s = alpha / r.
//
// Each Linear seam runs these next to its own product on the same local
// operands (the gathered input of a column-parallel projection, the
// partial output of a row-parallel one before its reduction), so the
// adapter rides on the seam's collectives: under tensor parallelism the
// factor on W's split side is split the same way and the other factor's
// gradient is a partial sum, added over the tensor-parallel ranks like the
// norms' (parallel/tensor/replicated_grads.hpp).
//
// h = x A^T and g = dy B are recomputed in backward from x and dy rather
// than kept: r columns each, cheap next to the base product.
#include <utility>
#include <vector>

#include "core/philox.hpp"
#include "kernels/checksum.hpp"
#include "kernels/gemm.hpp"
#include "model/activation_context.hpp"
#include "model/seams/linear.hpp"

namespace exa::model::lora {

template <class Act>
Act scratch(Act& buf, std::size_t rows, std::size_t cols) {
  if (buf.extent(0) * buf.extent(1) < rows * cols) buf = Act("exa::lora::scratch", rows, cols);
  return Act(buf.data(), rows, cols);
}

// A seam's buffers for its adapters: h = x A^T and g = dy B [N, r], and the
// dropped input or input gradient [N, in].
template <class T, class D>
struct Scratch {
  typename Linear<T, D>::Act h, g, x;
};

// dst += src (same shape).
template <class DST, class SRC>
void add(const DST& dst, const SRC& src) {
  using E = typename DST::execution_space;
  Kokkos::parallel_for(
      "exa::lora::add", Kokkos::MDRangePolicy<E, Kokkos::Rank<2>>({0, 0}, {dst.extent(0), dst.extent(1)}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { dst(i, j) += src(i, j); });
}

// A distinct key for each adapted projection of a layer context's key
// (0 stays 0: no dropout).
inline std::uint64_t key(std::uint64_t context_key, std::uint64_t projection) {
  if (context_key == 0) return 0;
  const std::uint64_t z = kernels::checksum_fmix64(context_key + 0x9E3779B97F4A7C15ull * (projection + 1));
  return z == 0 ? 1 : z;
}

// The adapter of a projection from the layer's values (and, for backward,
// gradients); empty when the projection has none.
// `dropout` and `key`: lora.dropout and this projection's key in this
// micro-batch (0: none, e.g. evaluation).
template <class T, class D>
LoraAdapter<T, D> adapter(const typename LayerWeights<T, D>::Lora2& v, double scale,
                          const typename LayerWeights<T, D>::Lora2* g = nullptr, double dropout = 0.0,
                          std::uint64_t key = 0) {
  LoraAdapter<T, D> ad;
  if (v.a.data() == nullptr) return ad;
  ad.a = v.a;
  ad.b = v.b;
  if (g) {
    ad.da = g->a;
    ad.db = g->b;
  }
  ad.scale = T(scale);
  ad.dropout = T(dropout);
  ad.key = key;
  return ad;
}

// The same for expert e's slice of a stacked [S, .., ..] adapter.
template <class T, class D>
LoraAdapter<T, D> adapter(const typename LayerWeights<T, D>::Lora3& v, std::int64_t e, double scale,
                          const typename LayerWeights<T, D>::Lora3* g = nullptr, double dropout = 0.0,
                          std::uint64_t key = 0) {
  using L2 = typename LayerWeights<T, D>::Lora2;
  if (v.a.data() == nullptr) return {};
  const auto slice = [e](const auto& w) { return Kokkos::subview(w, e, Kokkos::ALL, Kokkos::ALL); };
  const L2 vs{slice(v.a), slice(v.b)};
  L2 gs;
  if (g) gs = L2{slice(g->a), slice(g->b)};
  return adapter<T, D>(vs, scale, g ? &gs : nullptr, dropout, key);
}

// Dropout on the adapter's input (lora.dropout, training only): element
// (row0 + i, j) of x is kept with probability 1 - p and scaled by 1/(1 - p),
// by a Philox draw of (key, row, column). The same mask is drawn again in
// backward (and under recomputation) from the same key, so nothing is kept.
template <class X, class O>
void dropout(const X& x, const O& out, double p, std::uint64_t key, std::size_t row0 = 0) {
  using E = typename O::execution_space;
  using T = typename O::non_const_value_type;
  const T inv = T(1.0 / (1.0 - p));
  const PhiloxKey k{std::uint32_t(key), std::uint32_t(key >> 32)};
  Kokkos::parallel_for(
      "exa::lora::dropout", Kokkos::MDRangePolicy<E, Kokkos::Rank<2>>({0, 0}, {x.extent(0), x.extent(1)}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        const PhiloxCounter c{std::uint32_t(row0 + i), std::uint32_t((row0 + i) >> 32), std::uint32_t(j),
                              0x44726f70u /* "Drop" */};
        const PhiloxCounter r = philox4x32(c, k);
        out(i, j) = uniform_open0(r.c0, r.c1) > p ? x(i, j) * inv : T(0);
      });
}

// An adapter's input: x itself, or with dropout (p > 0 and a key) its
// dropped copy in the scratch.
template <class T, class D, class X>
typename Linear<T, D>::Act dropped(const X& x, double p, std::uint64_t key, Scratch<T, D>& s,
                                   std::size_t row0 = 0) {
  if (p <= 0 || key == 0) return typename Linear<T, D>::Act(x.data(), x.extent(0), x.extent(1));
  const auto xd = scratch(s.x, x.extent(0), x.extent(1));
  dropout(x, xd, p, key, row0);
  return xd;
}
template <class T, class D, class X>
typename Linear<T, D>::Act input(const X& x, const LoraAdapter<T, D>& ad, Scratch<T, D>& s, std::size_t row0 = 0) {
  return dropped(x, double(ad.dropout), ad.key, s, row0);
}

// A layer's projection's adapter in layer context c: its dropout keyed by
// the context's key and `proj`, a number distinct per projection of a layer.
template <class T, class D>
LoraAdapter<T, D> in(const LayerContext<T, D>& c, const LayerWeights<T, D>& lw,
                     const typename LayerWeights<T, D>::Lora2& v, std::uint64_t proj,
                     const typename LayerWeights<T, D>::Lora2* g = nullptr) {
  return adapter<T, D>(v, lw.lora_scale, g, lw.lora_dropout, key(c.lora_key, proj));
}
// The same for stacked expert e's slice.
template <class T, class D>
LoraAdapter<T, D> in(const LayerContext<T, D>& c, const LayerWeights<T, D>& lw,
                     const typename LayerWeights<T, D>::Lora3& v, std::int64_t e, std::uint64_t proj,
                     const typename LayerWeights<T, D>::Lora3* g = nullptr) {
  return adapter<T, D>(v, e, lw.lora_scale, g, lw.lora_dropout, key(c.lora_key, proj + 16 * std::uint64_t(e)));
}

// y += s (drop(x) A^T) B^T; x's rows are rows row0.. of the seam's input.
template <class T, class D, class X, class Y>
void forward(const X& x, const LoraAdapter<T, D>& ad, const Y& y, Scratch<T, D>& s, std::size_t row0 = 0) {
  const auto xin = input(x, ad, s, row0);
  const auto h = scratch(s.h, x.extent(0), ad.a.extent(0));
  kernels::gemm('N', 'T', T(1), xin, ad.a, T(0), h);
  kernels::gemm('N', 'T', ad.scale, h, ad.b, T(1), y);
}

// dx += drop'(s (dy B) A), dx's rows being rows row0.. of the input
template <class T, class D, class DY, class DX>
void backward_input(const DY& dy, const LoraAdapter<T, D>& ad, const DX& dx, Scratch<T, D>& s,
                    std::size_t row0 = 0) {
  const auto g = scratch(s.g, dy.extent(0), ad.b.extent(1));
  kernels::gemm('N', 'N', T(1), dy, ad.b, T(0), g);
  if (!ad.drops()) {
    kernels::gemm('N', 'N', ad.scale, g, ad.a, T(1), dx);
    return;
  }
  const auto t = scratch(s.x, dx.extent(0), dx.extent(1));
  kernels::gemm('N', 'N', ad.scale, g, ad.a, T(0), t);
  dropout(t, t, double(ad.dropout), ad.key, row0);
  add(dx, t);
}

// dA (+)= s (dy B)^T drop(x),  dB (+)= s dy^T (drop(x) A^T)
template <class T, class D, class X, class DY>
void backward_weight(const X& x, const DY& dy, const LoraAdapter<T, D>& ad, bool accumulate, Scratch<T, D>& s,
                     std::size_t row0 = 0) {
  const T beta = accumulate ? T(1) : T(0);
  const auto xin = input(x, ad, s, row0);
  const auto g = scratch(s.g, dy.extent(0), ad.b.extent(1));
  kernels::gemm('N', 'N', T(1), dy, ad.b, T(0), g);
  kernels::gemm('T', 'N', ad.scale, g, xin, beta, ad.da);
  const auto h = scratch(s.h, x.extent(0), ad.a.extent(0));
  kernels::gemm('N', 'T', T(1), xin, ad.a, T(0), h);
  kernels::gemm('T', 'N', ad.scale, dy, h, beta, ad.db);
}

// The embedding's adapter, W [V, d] + s B A: the lookup seams gather hb =
// B's rows of the tokens (this rank's vocabulary's, zero elsewhere) and
// scatter the returned gradient of those rows into dB themselves.

// out += s hb A
template <class T, class D, class HB, class OUT>
void table_forward(const HB& hb, const LoraAdapter<T, D>& ad, const OUT& out) {
  kernels::gemm('N', 'N', ad.scale, hb, ad.a, T(1), out);
}

// dA += s hb^T dout; returns s dout A^T, the gradient of hb to scatter into dB.
template <class T, class D, class HB, class DOUT>
typename Linear<T, D>::Act table_backward(const HB& hb, const DOUT& dout, const LoraAdapter<T, D>& ad,
                                          Scratch<T, D>& s) {
  kernels::gemm('T', 'N', ad.scale, hb, dout, T(1), ad.da);
  const auto g = scratch(s.g, dout.extent(0), ad.b.extent(1));
  kernels::gemm('N', 'T', ad.scale, dout, ad.a, T(0), g);
  return g;
}

// The routed experts' adapters, one A [r, in] and B [out, r] per expert,
// on the grouped products of a dispatcher (rows off[e] .. off[e+1] of X
// belong to expert e, kernels/gemm.hpp).

// v *= s over the first `rows` rows.
template <class V>
void scale_rows(const V& v, std::size_t rows, typename V::non_const_value_type s) {
  using E = typename V::execution_space;
  const std::size_t cols = v.extent(1);
  Kokkos::parallel_for(
      "exa::lora::scale", Kokkos::MDRangePolicy<E, Kokkos::Rank<2>>({0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { v(i, j) *= s; });
}

// {drop(X), h = s drop(X) A_e^T per group}, both in the scratch.
template <class T, class D, class X>
std::pair<typename Linear<T, D>::Act, typename Linear<T, D>::Act> grouped_h(
    const X& x, const typename LayerWeights<T, D>::Lora3& ad, double s, const std::vector<index_t>& off,
    Scratch<T, D>& sc, double p, std::uint64_t key) {
  const auto xin = dropped(x, p, key, sc);
  const auto h = scratch(sc.h, x.extent(0), ad.a.extent(1));
  kernels::grouped_linear_forward(xin, ad.a, off, h);
  scale_rows(h, std::size_t(off[ad.a.extent(0)]), T(s));
  return {xin, h};
}

// Y[rows of e] += s (drop(X) A_e^T) B_e^T
template <class T, class D, class X, class Y>
void grouped_forward(const X& x, const typename LayerWeights<T, D>::Lora3& ad, double s,
                     const std::vector<index_t>& off, const Y& y, Scratch<T, D>& sc, double p = 0.0,
                     std::uint64_t key = 0) {
  const auto h = grouped_h(x, ad, s, off, sc, p, key).second;
  kernels::grouped_linear_forward(h, ad.b, off, y, /*accumulate=*/true);
}

// dX[rows of e] += drop'(s (dY B_e) A_e), dA_e += s (dY B_e)^T drop(X),
// dB_e += s dY^T (drop(X) A_e^T) (the gradients skipped when `g` has none).
template <class T, class D, class X, class DY, class DX>
void grouped_backward(const X& x, const typename LayerWeights<T, D>::Lora3& ad,
                      const typename LayerWeights<T, D>::Lora3& g, double s, const DY& dy,
                      const std::vector<index_t>& off, const DX& dx, Scratch<T, D>& sc, double p = 0.0,
                      std::uint64_t key = 0) {
  const std::size_t rows = std::size_t(off[ad.a.extent(0)]);
  const auto [xin, h] = grouped_h(x, ad, s, off, sc, p, key);
  const auto gr = scratch(sc.g, dy.extent(0), ad.b.extent(2));
  kernels::grouped_linear_backward(h, ad.b, dy, off, gr, g.b, /*accumulate_dW=*/true);
  scale_rows(gr, rows, T(s));
  if (p <= 0 || key == 0) {
    kernels::grouped_linear_backward(x, ad.a, gr, off, dx, g.a, /*accumulate_dW=*/true, /*accumulate_dx=*/true);
    return;
  }
  // dA from the dropped rows; dX through the mask: gr A_e per group (a
  // backward without dW) into the scratch, dropped, then added.
  using Act = typename Linear<T, D>::Act;
  using W3 = typename LayerWeights<T, D>::W3;
  kernels::grouped_linear_backward(xin, ad.a, gr, off, Act(), g.a, /*accumulate_dW=*/true);
  const auto t = scratch(sc.x, x.extent(0), x.extent(1));
  kernels::grouped_linear_backward(xin, ad.a, gr, off, t, W3(), false, /*accumulate_dx=*/false);
  const auto r = Kokkos::make_pair(std::size_t(0), rows);
  const auto tr = Kokkos::subview(t, r, Kokkos::ALL);
  dropout(tr, tr, p, key);
  add(Kokkos::subview(dx, r, Kokkos::ALL), tr);
}

}  // namespace exa::model::lora
