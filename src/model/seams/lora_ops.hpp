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
#include <vector>

#include "kernels/gemm.hpp"
#include "model/seams/linear.hpp"

namespace exa::model::lora {

template <class Act>
Act scratch(Act& buf, std::size_t rows, std::size_t cols) {
  if (buf.extent(0) * buf.extent(1) < rows * cols) buf = Act("exa::lora::scratch", rows, cols);
  return Act(buf.data(), rows, cols);
}

// The adapter of a projection from the layer's values (and, for backward,
// gradients); empty when the projection has none.
template <class T, class D>
LoraAdapter<T, D> adapter(const typename LayerWeights<T, D>::Lora2& v, double scale,
                          const typename LayerWeights<T, D>::Lora2* g = nullptr) {
  LoraAdapter<T, D> ad;
  if (v.a.data() == nullptr) return ad;
  ad.a = v.a;
  ad.b = v.b;
  if (g) {
    ad.da = g->a;
    ad.db = g->b;
  }
  ad.scale = T(scale);
  return ad;
}

// The same for shared expert e's slice of a [S, .., ..] adapter.
template <class T, class D>
LoraAdapter<T, D> adapter(const typename LayerWeights<T, D>::Lora3& v, std::int64_t e, double scale,
                          const typename LayerWeights<T, D>::Lora3* g = nullptr) {
  LoraAdapter<T, D> ad;
  if (v.a.data() == nullptr) return ad;
  const auto slice = [e](const auto& w) { return Kokkos::subview(w, e, Kokkos::ALL, Kokkos::ALL); };
  ad.a = slice(v.a);
  ad.b = slice(v.b);
  if (g) {
    ad.da = slice(g->a);
    ad.db = slice(g->b);
  }
  ad.scale = T(scale);
  return ad;
}

// y += s (x A^T) B^T
template <class T, class D, class X, class Y>
void forward(const X& x, const LoraAdapter<T, D>& ad, const Y& y, typename Linear<T, D>::Act& hbuf) {
  const auto h = scratch(hbuf, x.extent(0), ad.a.extent(0));
  kernels::gemm('N', 'T', T(1), x, ad.a, T(0), h);
  kernels::gemm('N', 'T', ad.scale, h, ad.b, T(1), y);
}

// dx += s (dy B) A
template <class T, class D, class DY, class DX>
void backward_input(const DY& dy, const LoraAdapter<T, D>& ad, const DX& dx, typename Linear<T, D>::Act& gbuf) {
  const auto g = scratch(gbuf, dy.extent(0), ad.b.extent(1));
  kernels::gemm('N', 'N', T(1), dy, ad.b, T(0), g);
  kernels::gemm('N', 'N', ad.scale, g, ad.a, T(1), dx);
}

// dA (+)= s (dy B)^T x,  dB (+)= s dy^T (x A^T)
template <class T, class D, class X, class DY>
void backward_weight(const X& x, const DY& dy, const LoraAdapter<T, D>& ad, bool accumulate,
                     typename Linear<T, D>::Act& hbuf, typename Linear<T, D>::Act& gbuf) {
  const T beta = accumulate ? T(1) : T(0);
  const auto g = scratch(gbuf, dy.extent(0), ad.b.extent(1));
  kernels::gemm('N', 'N', T(1), dy, ad.b, T(0), g);
  kernels::gemm('T', 'N', ad.scale, g, x, beta, ad.da);
  const auto h = scratch(hbuf, x.extent(0), ad.a.extent(0));
  kernels::gemm('N', 'T', T(1), x, ad.a, T(0), h);
  kernels::gemm('T', 'N', ad.scale, dy, h, beta, ad.db);
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

// Y[rows of e] += s (X A_e^T) B_e^T
template <class T, class D, class X, class Y>
void grouped_forward(const X& x, const typename LayerWeights<T, D>::Lora3& ad, double s,
                     const std::vector<index_t>& off, const Y& y, typename Linear<T, D>::Act& hbuf) {
  const std::size_t E = ad.a.extent(0), rows = std::size_t(off[E]);
  const auto h = scratch(hbuf, x.extent(0), ad.a.extent(1));
  kernels::grouped_linear_forward(x, ad.a, off, h);
  scale_rows(h, rows, T(s));
  kernels::grouped_linear_forward(h, ad.b, off, y, /*accumulate=*/true);
}

// dX[rows of e] += s (dY B_e) A_e, dA_e += s (dY B_e)^T X, dB_e += s dY^T (X A_e^T)
// (the gradients skipped when `g` has none).
template <class T, class D, class X, class DY, class DX>
void grouped_backward(const X& x, const typename LayerWeights<T, D>::Lora3& ad,
                      const typename LayerWeights<T, D>::Lora3& g, double s, const DY& dy,
                      const std::vector<index_t>& off, const DX& dx, typename Linear<T, D>::Act& hbuf,
                      typename Linear<T, D>::Act& gbuf) {
  const std::size_t E = ad.a.extent(0), rows = std::size_t(off[E]);
  const auto h = scratch(hbuf, x.extent(0), ad.a.extent(1));
  kernels::grouped_linear_forward(x, ad.a, off, h);
  scale_rows(h, rows, T(s));
  const auto gr = scratch(gbuf, dy.extent(0), ad.b.extent(2));
  kernels::grouped_linear_backward(h, ad.b, dy, off, gr, g.b, /*accumulate_dW=*/true);
  scale_rows(gr, rows, T(s));
  kernels::grouped_linear_backward(x, ad.a, gr, off, dx, g.a, /*accumulate_dW=*/true, /*accumulate_dx=*/true);
}

}  // namespace exa::model::lora
