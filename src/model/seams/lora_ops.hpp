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

}  // namespace exa::model::lora
