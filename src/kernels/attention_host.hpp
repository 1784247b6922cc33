#pragma once
// Host path of causal GQA attention (see attention.hpp for the maths): the
// products go through the gemm wrapper (vendor BLAS), only the softmax and the
// copies are element loops.
//
// q, k, v are [B,T,H,hd], so one head's rows are strided (row stride H*hd).
// The products read and write the heads in place, as BLAS matrices with
// that leading dimension (HostMat below): no copy of Q, K, V, dO into
// scratch and none of O, dQ, dK, dV out of it (those copies took ~20 ms
// of a 1.3 s one-core bench step). Only the scores live in scratch.
//
// Queries are processed in tiles of `host_block_q` rows. A tile [i0,i1) only
// needs the keys [lo, hi) from its first row's document start to what its
// last row sees (hi = visible_keys(i1 - 1), i1 for offsets (0, 0); lo = 0
// without documents), so keys in the future or in earlier documents are
// skipped, and the score scratch is bounded by host_block_q x Tk. A tile that sees no key does no
// product at all: out = 0, lse = -inf, dq = 0.
//
// Forward, per (b, h, query tile), m = i1 - i0:
//   S[m,n] = scale Q_t K[0:n]^T                    gemm
//   P = softmax over the keys row i sees           lse_i = max + log(sum)
//   O_t = P V[0:n]                                 gemm
// Backward, per (b, kv head g): dK_g, dV_g accumulate in place over the
// query heads of the group and their query tiles in a fixed order (gemm
// with beta = 1); no atomics, bit-reproducible for a given BLAS and thread
// count. Per (h, tile):
//   P  = exp(scale Q_t K^T - lse) (0 for the keys row i does not see)
//   dV += P^T dO_t                                 gemm
//   dP = dO_t V^T                                  gemm
//   dS = P (dP - D),  D_i = dO_i . O_i
//   dQ_t = scale dS K                              gemm
//   dK += scale dS^T Q_t                           gemm
// The exps are host_loops.hpp's branch-free polynomial, which the row loops
// vectorise (libm's exp is a call per score).
//
// On one host thread (Serial, or OpenMP with one thread) the gemm calls are
// issued from the host, one after another, and the element loops are
// RangePolicy parallel_for over rows. With a BLAS TPL the products call
// the host BLAS directly (strided operands are not a View layout that
// Kokkos Kernels hands to it); without one, KokkosBlas::gemm on
// LayoutStride views. With several host threads and a BLAS TPL, the
// (b, kv head) pairs are independent tasks instead: a parallel_for over
// them, each task on one thread with its own scratch (a UniqueToken slot),
// calling the BLAS directly (an OpenMP BLAS runs single-threaded inside a
// parallel region) and running its element loops inline. The products per
// head are small (T x hd, hd = 64), so a BLAS split over threads per call
// scaled poorly (1.3-1.4x on 2 threads against 1.7x for the expert FFNs);
// whole heads per thread keep every thread on its own products.
// No profiling region is pushed here: the bench's profiler treats every
// region other than exa::gemm* / exa::grouped_linear* as a phase, so the
// kernels and gemms stay attributed to the caller's forward/attn and
// backward/attn phases.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/gemm.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/host_tasks.hpp"

namespace exa::kernels::attention_detail {

// A row-major matrix in host memory: rows x cols, row stride ld, unit
// column stride (a head of a [B,T,H,hd] view, or scores scratch).
template <class T>
struct HostMat {
  T* p;
  int rows, cols, ld;
};

// Rows [i0, i0 + rows) of head h of x [B,T,H,hd] at batch b.
template <class X>
HostMat<typename X::value_type> head_rows(const X& x, int b, int h, int i0, int rows) {
  return {&x(b, i0, h, 0), rows, int(x.extent(3)), int(x.stride(1))};
}
template <class T, class... Vs>
constexpr bool same_scalar() {
  return (std::is_same_v<std::remove_const_t<typename Vs::value_type>, T> && ...);
}

// How a (b, kv head) task runs its loops and products: inline on its own
// thread with a direct (single-threaded) BLAS call (`serial`), or as
// parallel_for / one BLAS call at a time on `exec`.
template <class Exec, class T>
struct HostRunner {
  Exec exec;
  bool serial = false;

  template <class F>
  void rows(const char* label, int n, const F& f) const {
    if (serial) {
      for (int r = 0; r < n; ++r) f(r);
    } else {
      Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec>(exec, 0, n), f);
    }
  }

  // C = alpha op(A) op(B) + beta C (A, B: HostMat<T> or HostMat<const T>).
  template <class MA, class MB>
  void gemm(char ta, char tb, T alpha, const MA& A, const MB& B, T beta, const HostMat<T>& C) const {
    const int m = C.rows, n = C.cols;
    const int k = (ta == 'N') ? A.cols : A.rows;
    if (serial) {
      serial_gemm<T>(ta, tb, m, n, k, alpha, A.p, A.ld, B.p, B.ld, beta, C.p, C.ld);
      return;
    }
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
    // The region the gemm wrapper pushes: the bench's profiler counts it as gemm.
    exec.fence();
    Kokkos::Profiling::pushRegion("exa::gemm");
    serial_gemm<T>(ta, tb, m, n, k, alpha, A.p, A.ld, B.p, B.ld, beta, C.p, C.ld);
    Kokkos::Profiling::popRegion();
#else
    using D = Kokkos::Device<Exec, Kokkos::HostSpace>;
    using U = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    using CM = Kokkos::View<const T**, Kokkos::LayoutStride, D, U>;
    using MM = Kokkos::View<T**, Kokkos::LayoutStride, D, U>;
    auto lay = [](const auto& x) { return Kokkos::LayoutStride(x.rows, x.ld, x.cols, 1); };
    kernels::gemm(ta, tb, alpha, CM(A.p, lay(A)), CM(B.p, lay(B)), beta, MM(C.p, lay(C)), exec);
#endif
  }
};

// Runs task(t, runner, slot) for t in [0, n): as host tasks (host_tasks.hpp)
// on a multi-thread host space, else in order on the calling thread with
// slot 0 and the parallel_for / one-BLAS-call-at-a-time runner.
template <class T, class Exec, class F>
void host_task_loop(const Exec& exec, const char* label, int n, const F& task) {
  if (!host_tasks(exec)) {
    const HostRunner<Exec, T> run{exec, false};
    for (int t = 0; t < n; ++t) task(t, run, 0);
    return;
  }
  const HostRunner<Exec, T> run{exec, true};
  host_parallel_tasks(exec, label, n, [=](const int t, const int slot) { task(t, run, slot); });
}

inline int host_block(const AttentionTiles& t, int Tn) {
  check_tiles(t);
  return t.host_block_q < Tn ? t.host_block_q : Tn;
}

// Zero rows i0 .. i0+m-1 of head h of x [B,T,H,hd] at batch b.
template <class R, class X>
void host_zero_rows(const R& run, const char* label, const X& x, int b, int i0, int m, int h) {
  using T = scalar_of<X>;
  const int hd = static_cast<int>(x.extent(3));
  run.rows(label, m, [=](const int r) {
    auto* d = &x(b, i0 + r, h, 0);
    for (int c = 0; c < hd; ++c) d[c] = T(0);
  });
}

template <class Q, class K, class V, class O, class L>
void forward_host(const Q& q, const K& k, const V& v, const O& out, const L& lse, const AttentionTiles& tiles,
                  AttentionOffsets pos = {}, const exec_of<O>& exec = exec_of<O>{}) {
  using T = scalar_of<O>;
  using Buf = Kokkos::View<T*, typename O::device_type>;
  static_assert(same_scalar<T, Q, K, V>(), "exa::kernels::attention_forward: q, k, v and out must hold one type");
  const Shape sh = check_shapes(q, k, v);
  EXA_REQUIRE(same_shape4(out, q) && lse_shape_ok(q, lse),
              "exa::kernels::attention_forward: out must be shaped like q and lse [B,H,T]");
  const int B = sh.B, Tn = sh.T, Tk = sh.Tk, H = sh.H, hd = sh.hd, rep = sh.rep;
  if (B == 0 || Tn == 0 || H == 0) return;
  const int bq = host_block(tiles, Tn);
  const Visibility vis(pos, Tn, Tk);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const std::size_t per = static_cast<std::size_t>(bq) * Tk;  // scores
  Buf buf(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::host_fwd_scratch"),
          per * std::size_t(host_task_slots(exec)));
  T* const base = buf.data();
  const int Hkv = H / rep;
  // Task (b, g): kv head g of sequence b and its query heads.
  host_task_loop<T>(exec, "exa::attention::host_forward_tasks", B * Hkv, [=](const int task, const auto& run,
                                                                              const int slot) {
    const int b = task / Hkv, g = task % Hkv;
    T* Sc = base + per * std::size_t(slot);
    for (int h = g * rep; h < (g + 1) * rep; ++h) {
      for (int i0 = 0; i0 < Tn; i0 += bq) {
        const int m = bq < Tn - i0 ? bq : Tn - i0;
        // Keys lo..hi-1 reach this tile (its first row sees the earliest).
        const int lo = vis.key_lo(b, i0), hi = vis.key_hi(i0 + m - 1);
        if (hi <= lo) {  // no row of the tile sees a key
          host_zero_rows(run, "exa::attention::host_zero_out", out, b, i0, m, h);
          run.rows("exa::attention::host_empty_lse", m,
                   [=](const int r) { lse(b, h, i0 + r) = -std::numeric_limits<T>::infinity(); });
          continue;
        }
        const int n = hi - lo;
        const HostMat<T> S{Sc, m, n, n};
        run.gemm('N', 'T', scale, head_rows(q, b, h, i0, m), head_rows(k, b, g, lo, n), T(0), S);
        run.rows("exa::attention::host_softmax", m, [=](const int r) {
          const int i = i0 + r;
          // Row i sees the columns [a, e) of the tile's keys.
          const int a = vis.key_lo(b, i) - lo, e = vis.key_hi(i) - lo;
          T* s = Sc + static_cast<std::size_t>(r) * n;
          if (e <= a) {  // the row sees no key: P row 0, so out row 0
            for (int j = 0; j < n; ++j) s[j] = T(0);
            lse(b, h, i) = -std::numeric_limits<T>::infinity();
            return;
          }
          T mx = s[a];
          for (int j = a + 1; j < e; ++j) mx = s[j] > mx ? s[j] : mx;
          for (int j = a; j < e; ++j) s[j] = detail::host_exp_nonpositive(s[j] - mx);
          const T sum = detail::sum16(s + a, e - a);
          const T inv = T(1) / sum;
          for (int j = a; j < e; ++j) s[j] *= inv;
          for (int j = 0; j < a; ++j) s[j] = T(0);
          for (int j = e; j < n; ++j) s[j] = T(0);
          lse(b, h, i) = mx + std::log(sum);
        });
        run.gemm('N', 'N', T(1), S, head_rows(v, b, g, lo, n), T(0), head_rows(out, b, h, i0, m));
      }
    }
  });
}

template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void backward_host(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse, const DQ& dq,
                   const DK& dk, const DV& dv, const AttentionTiles& tiles, AttentionOffsets pos = {},
                   const exec_of<DQ>& exec = exec_of<DQ>{}) {
  using T = scalar_of<DQ>;
  using Buf = Kokkos::View<T*, typename DQ::device_type>;
  static_assert(same_scalar<T, DO, Q, K, V, O, DK, DV>(),
                "exa::kernels::attention_backward: every [B,T,H,hd] view must hold one type");
  const Shape sh = check_shapes(q, k, v);
  EXA_REQUIRE(same_shape4(dout, q) && same_shape4(out, q) && same_shape4(dq, q) && same_shape4(dk, k) &&
                  same_shape4(dv, k) && lse_shape_ok(q, lse),
              "exa::kernels::attention_backward: dout, out, dq must be shaped like q, dk and dv like k, lse [B,H,T]");
  const int B = sh.B, Tn = sh.T, Tk = sh.Tk, H = sh.H, Hkv = sh.Hkv, hd = sh.hd, rep = sh.rep;
  // T == 0 still runs: dk and dv are then zero.
  if (B == 0 || H == 0) return;
  const int bq = host_block(tiles, Tn);
  const Visibility vis(pos, Tn, Tk);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const std::size_t tile_s = static_cast<std::size_t>(bq) * Tk;
  // P, dP [bq,Tk]; D [T].
  const std::size_t per = 2 * tile_s + Tn;
  Buf buf(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::host_bwd_scratch"),
          per * std::size_t(host_task_slots(exec)));
  T* const base = buf.data();
  // Task (b, g): kv head g of sequence b, its dK/dV summed over the group's
  // query heads in order.
  host_task_loop<T>(exec, "exa::attention::host_backward_tasks", B * Hkv, [=](const int task, const auto& run,
                                                                               const int slot) {
    const int b = task / Hkv, g = task % Hkv;
    T* Pc = base + per * std::size_t(slot);
    T* DPc = Pc + tile_s;
    T* Dc = DPc + tile_s;
    // dK/dV rows [r0, r1) of kv head g set to zero.
    auto zero_dkdv = [&](int r0, int r1) {
      run.rows("exa::attention::host_zero_dkdv", r1 - r0, [=](const int r) {
        T* a = &dk(b, r0 + r, g, 0);
        T* c = &dv(b, r0 + r, g, 0);
        for (int e = 0; e < hd; ++e) {
          a[e] = T(0);
          c[e] = T(0);
        }
      });
    };
    // dK/dV rows [0, reached) hold contributions (every head of the group
    // reaches the same keys, tile by tile).
    int reached = 0;
    for (int hr = 0; hr < rep; ++hr) {
      const int h = g * rep + hr;
      run.rows("exa::attention::host_delta", Tn,
               [=](const int i) { Dc[i] = dot<T>(&dout(b, i, h, 0), &out(b, i, h, 0), hd); });
      for (int i0 = 0; i0 < Tn; i0 += bq) {
        const int m = bq < Tn - i0 ? bq : Tn - i0;
        // Keys lo..hi-1 reach this tile.
        const int lo = vis.key_lo(b, i0), hi = vis.key_hi(i0 + m - 1);
        // The first contribution to dK/dV rows overwrites: the group's first
        // head zeroes the rows [reached, hi) that this tile reaches first,
        // then every tile accumulates (beta 1).
        if (hr == 0 && hi > reached) {
          zero_dkdv(reached, hi);
          reached = hi;
        }
        if (hi <= lo) {  // no row of the tile sees a key
          host_zero_rows(run, "exa::attention::host_zero_dq", dq, b, i0, m, h);
          continue;
        }
        const int n = hi - lo;
        const auto Qt = head_rows(q, b, h, i0, m);
        const auto DOt = head_rows(dout, b, h, i0, m);
        const auto Kn = head_rows(k, b, g, lo, n);
        const HostMat<T> P{Pc, m, n, n}, DP{DPc, m, n, n};
        run.gemm('N', 'T', scale, Qt, Kn, T(0), P);
        run.rows("exa::attention::host_probs", m, [=](const int r) {
          const int i = i0 + r;
          const int a = vis.key_lo(b, i) - lo, e = vis.key_hi(i) - lo;
          T* p = Pc + static_cast<std::size_t>(r) * n;
          const T l = lse(b, h, i);  // not read for a row that sees no key (it may be -inf)
          for (int j = 0; j < a && j < n; ++j) p[j] = T(0);
          for (int j = a; j < e; ++j) p[j] = detail::host_exp(p[j] - l);
          for (int j = e > a ? e : a; j < n; ++j) p[j] = T(0);
        });
        run.gemm('T', 'N', T(1), P, DOt, T(1), head_rows(dv, b, g, lo, n));
        run.gemm('N', 'T', T(1), DOt, head_rows(v, b, g, lo, n), T(0), DP);
        run.rows("exa::attention::host_dscores", m, [=](const int r) {
          const int i = i0 + r;
          const T* p = Pc + static_cast<std::size_t>(r) * n;
          T* d = DPc + static_cast<std::size_t>(r) * n;
          const T di = Dc[i];
          for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - di);  // p = 0 masks unseen keys
        });
        run.gemm('N', 'N', scale, DP, Kn, T(0), head_rows(dq, b, h, i0, m));
        run.gemm('T', 'N', scale, DP, Qt, T(1), head_rows(dk, b, g, lo, n));
      }
    }
    if (reached < Tk) zero_dkdv(reached, Tk);  // keys that no query sees
  });
}

}  // namespace exa::kernels::attention_detail
