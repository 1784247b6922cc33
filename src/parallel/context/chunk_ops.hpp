#pragma once
// Element kernels of the context-parallel attention: moving one zigzag
// chunk of rows between a rank's [B,T,H,hd] tensors and contiguous chunk
// buffers [B,c,H,hd] (the layout the attention kernels and the messages
// need), the same for the log-sum-exp [B,H,T] <-> [B,H,c], sums of flat
// buffers, and the log-sum-exp merge of two partial attention results.
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::parallel::context::ops {

// dst [B,c,H,hd] = rows [row0, row0 + c) of x [B,T,H,hd] (to_chunk), or the
// reverse (!to_chunk).
template <class X, class C>
void copy_rows(const X& x, const C& chunk, index_t row0, bool to_chunk) {
  using Exec = exec_of<C>;
  // Natural indices (no divisions per element); the last one is the
  // contiguous run on the host and the coalesced one on a GPU.
  Kokkos::parallel_for(
      "exa::context::copy_rows",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<4>>(
          {0, 0, 0, 0}, {index_t(chunk.extent(0)), index_t(chunk.extent(1)), index_t(chunk.extent(2)),
                         index_t(chunk.extent(3))}),
      KOKKOS_LAMBDA(const index_t b, const index_t i, const index_t h, const index_t k) {
        if (to_chunk)
          chunk(b, i, h, k) = x(b, row0 + i, h, k);
        else
          x(b, row0 + i, h, k) = chunk(b, i, h, k);
      });
}

// The same for the log-sum-exp: chunk [B,H,c] <-> lse [B,H,T] columns [col0, col0 + c).
template <class L, class C>
void copy_lse(const L& lse, const C& chunk, index_t col0, bool to_chunk) {
  using Exec = exec_of<C>;
  Kokkos::parallel_for(
      "exa::context::copy_lse",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3>>(
          {0, 0, 0}, {index_t(chunk.extent(0)), index_t(chunk.extent(1)), index_t(chunk.extent(2))}),
      KOKKOS_LAMBDA(const index_t b, const index_t h, const index_t i) {
        if (to_chunk)
          chunk(b, h, i) = lse(b, h, col0 + i);
        else
          lse(b, h, col0 + i) = chunk(b, h, i);
      });
}

// y[i] += x[i] over n elements.
template <class T, class Exec = ExecSpace>
void add(T* y, const T* x, index_t n) {
  Kokkos::parallel_for(
      "exa::context::add", Kokkos::RangePolicy<Exec>(0, n), KOKKOS_LAMBDA(const index_t i) { y[i] += x[i]; });
}

template <class T, class Exec = ExecSpace>
void fill(T* y, T v, index_t n) {
  Kokkos::parallel_for(
      "exa::context::fill", Kokkos::RangePolicy<Exec>(0, n), KOKKOS_LAMBDA(const index_t i) { y[i] = v; });
}

// Online-softmax merge of a block's partial result (ob [B,c,H,hd], lb
// [B,H,c]: the attention of the rows over one key block) into the running
// one (o, l): with l' = log(e^l + e^lb), o = e^(l - l') o + e^(lb - l') ob.
// lse = -inf (a row that saw no key yet) is the neutral element.
template <class O, class L>
void merge(const O& o, const L& l, const O& ob, const L& lb) {
  using Exec = exec_of<O>;
  using T = typename O::non_const_value_type;
  const index_t B = o.extent(0), c = o.extent(1), H = o.extent(2), hd = o.extent(3);
  Kokkos::parallel_for(
      "exa::context::merge", Kokkos::RangePolicy<Exec>(0, B * c * H), KOKKOS_LAMBDA(const index_t n) {
        const index_t h = n % H, i = (n / H) % c, b = n / (H * c);
        const T l1 = l(b, h, i), l2 = lb(b, h, i);
        if (l2 == -kx::infinity<T>()) return;
        if (l1 == -kx::infinity<T>()) {
          for (index_t k = 0; k < hd; ++k) o(b, i, h, k) = ob(b, i, h, k);
          l(b, h, i) = l2;
          return;
        }
        const T m = l1 > l2 ? l1 : l2;
        const T w1 = kx::exp(l1 - m), w2 = kx::exp(l2 - m);
        const T s = w1 + w2;
        for (index_t k = 0; k < hd; ++k) o(b, i, h, k) = (w1 * o(b, i, h, k) + w2 * ob(b, i, h, k)) / s;
        l(b, h, i) = m + kx::log(s);
      });
}

// The all-to-all attention's moves between a rank's rows of every head
// (x [B,Tl,Hx,w]) and the whole sequences of a share of the heads
// (full [B,T,Hs,w]), through contiguous blocks [B,Tl,Hs,w] (one per peer):
// head_block: heads [h0, h0 + Hs) of x <-> blk.
template <class X, class T>
void head_block(const X& x, T* blk, index_t h0, index_t Hs, bool to_block) {
  using Exec = exec_of<X>;
  const index_t B = x.extent(0), Tl = x.extent(1), w = x.extent(3);
  Kokkos::parallel_for(
      "exa::context::head_block", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<4>>({0, 0, 0, 0}, {B, Tl, Hs, w}),
      KOKKOS_LAMBDA(const index_t b, const index_t t, const index_t h, const index_t e) {
        const index_t n = ((b * Tl + t) * Hs + h) * w + e;
        if (to_block)
          blk[n] = x(b, t, h0 + h, e);
        else
          x(b, t, h0 + h, e) = blk[n];
      });
}
// row_block: the rows of zigzag chunks g0 and g1 (each c rows) of full <-> blk.
template <class X, class T>
void row_block(const X& full, T* blk, index_t c, index_t g0, index_t g1, bool to_block) {
  using Exec = exec_of<X>;
  const index_t B = full.extent(0), Hs = full.extent(2), w = full.extent(3), Tl = 2 * c;
  Kokkos::parallel_for(
      "exa::context::row_block", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<4>>({0, 0, 0, 0}, {B, Tl, Hs, w}),
      KOKKOS_LAMBDA(const index_t b, const index_t t, const index_t h, const index_t e) {
        const index_t n = ((b * Tl + t) * Hs + h) * w + e;
        const index_t g = (t < c ? g0 * c + t : g1 * c + t - c);
        if (to_block)
          blk[n] = full(b, g, h, e);
        else
          full(b, g, h, e) = blk[n];
      });
}
// lse [B,H,T] <-> l4 [B,T,H,1] (so the log-sum-exp moves like a tensor of head width 1).
template <class L, class L4>
void lse_as_rows(const L& lse, const L4& l4, bool to_rows) {
  using Exec = exec_of<L4>;
  Kokkos::parallel_for(
      "exa::context::lse_as_rows",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3>>(
          {0, 0, 0}, {index_t(lse.extent(0)), index_t(lse.extent(1)), index_t(lse.extent(2))}),
      KOKKOS_LAMBDA(const index_t b, const index_t h, const index_t t) {
        if (to_rows)
          l4(b, t, h, 0) = lse(b, h, t);
        else
          lse(b, h, t) = l4(b, t, h, 0);
      });
}

}  // namespace exa::parallel::context::ops
