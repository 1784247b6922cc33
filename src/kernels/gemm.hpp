#pragma once
// Dense matrix products through KokkosBlas::gemm, which hands them to the
// vendor BLAS (OpenBLAS/MKL on host, cuBLAS on CUDA) when Kokkos Kernels was
// built with that TPL, and to its own portable kernel otherwise.
//
// Every tensor is LayoutRight (row-major). Kokkos Kernels' BLAS TPL takes
// all-LayoutRight operands directly: it calls the column-major BLAS on the
// transposed problem (C^T = op(B)^T op(A)^T) without any copy, so no operand
// swapping is needed here; bench/bench_gemm.cpp measures the wrapper against
// raw cblas_sgemm on the model's shapes.
//
// Under matmul_precision() == bf16 or fp16 the fp32 products round their
// inputs and go to oneDNN on a host execution space (onednn_matmul.hpp),
// to cuBLAS on CUDA (cublas_matmul.hpp); their operands must then be
// row-contiguous (stride 1 along a row), as every tensor of the model is.
// Another device space has no such path yet, and refuses rather than
// compute in fp32.
//
// Forms:
//   gemm(ta, tb, alpha, A, B, beta, C)       C = alpha op(A) op(B) + beta C
//   linear_forward(x, W, y)                  y = x W^T            (nn.Linear)
//   linear_backward(x, W, dy, dx, dW, acc)   dx = dy W, dW (+)= dy^T x
//   gemm_batched(...)                        one gemm per leading index of rank-3 Views
//   grouped_linear_forward/backward(...)     rows of X grouped by expert (host
//                                            offsets[E+1]), weights W[E,out,in]
//
// Unlike KokkosBlas::gemm (3.4), a product with an empty inner dimension
// (K = 0, e.g. the weight gradient of an expert that received no tokens)
// still applies beta to C, as BLAS does: C = beta C (C = 0 when beta = 0).
//
// Every form takes a trailing execution-space instance of C's execution
// space (default: the default instance), so that a caller can put compute on
// its own CUDA stream, apart from communication. Kokkos Kernels 3.4.1's
// KokkosBlas::gemm has no instance overload (it always runs on the default
// instance, cuBLAS on the default stream); 4.x has one. See run_gemm below.
#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/host_tasks.hpp"
#include "kernels/cublas_matmul.hpp"
#include "kernels/matmul_precision.hpp"
#include "kernels/onednn_matmul.hpp"

// KokkosBlas::gemm(space, transA, ...) is used from Kokkos Kernels 4.0 on
// (every 4.x has it; 3.4.1, the oldest release ExaMoE supports, does not).
// Older releases do not define KOKKOSKERNELS_VERSION (3.4.1 does not), and
// Kokkos Kernels is released in lockstep with Kokkos, so Kokkos' own
// version decides there.
#if defined(KOKKOSKERNELS_VERSION)
#define EXA_KK_GEMM_TAKES_INSTANCE (KOKKOSKERNELS_VERSION >= 40000)
#else
#define EXA_KK_GEMM_TAKES_INSTANCE (KOKKOS_VERSION >= 40000)
#endif

namespace exa::kernels {

namespace detail {

inline bool gemm_trans_flag(char t, const char* which) {
  EXA_REQUIRE(t == 'N' || t == 'n' || t == 'T' || t == 't',
              "exa::gemm: {} = '{}' is not a transpose flag; use 'N' or 'T'", which, t);
  return t == 'T' || t == 't';
}

// C = beta * C, with beta == 0 writing exact zeros (BLAS semantics: C is not read).
template <class CV>
void gemm_scale(const CV& C, typename CV::non_const_value_type beta, const exec_of<CV>& exec) {
  using T = typename CV::non_const_value_type;
  using Exec = exec_of<CV>;
  const index_t m = C.extent(0), n = C.extent(1);
  if (m == 0 || n == 0 || beta == T(1)) return;
  Kokkos::parallel_for(
      "exa::gemm::scale_c", Kokkos::RangePolicy<Exec>(exec, 0, m * n), KOKKOS_LAMBDA(index_t i) {
        const index_t r = i / n, c = i % n;
        C(r, c) = (beta == T(0)) ? T(0) : beta * C(r, c);
      });
}

// Checks that offsets (E+1 entries) is non-decreasing from 0 and fits in `rows`.
inline void check_group_offsets(const std::vector<index_t>& offsets, index_t experts, index_t rows,
                                const char* what) {
  EXA_REQUIRE(static_cast<index_t>(offsets.size()) == experts + 1,
              "{}: offsets has {} entries, expected E+1 = {}", what, offsets.size(), experts + 1);
  EXA_REQUIRE(offsets[0] == 0, "{}: offsets[0] = {}, expected 0", what, offsets[0]);
  for (index_t e = 0; e < experts; ++e)
    EXA_REQUIRE(offsets[e + 1] >= offsets[e], "{}: offsets decrease at expert {} ({} > {})", what, e,
                offsets[e], offsets[e + 1]);
  EXA_REQUIRE(offsets[experts] <= rows, "{}: offsets[E] = {} exceeds the {} rows of the token buffer",
              what, offsets[experts], rows);
}

// True when `exec` is not the default instance of its space, i.e. it has its
// own CUDA stream. Host instances run their work synchronously, so for them
// the distinction does not matter and this is false.
template <class Exec>
bool is_own_stream(const Exec& exec) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value) return exec.cuda_stream() != Kokkos::Cuda().cuda_stream();
#endif
  (void)exec;
  return false;
}

// KokkosBlas::gemm on `exec`. With Kokkos Kernels >= 4.0 that is its
// instance overload. Older releases (3.4.1) only run on the default
// instance (cuBLAS on the default stream). The product is the same there
// (the same BLAS call, bit for bit), only the stream differs, so for an
// instance with its own stream the call is ordered by hand: wait for the
// work already queued on `exec` (which may have produced A and B), run, and
// wait for the device (whichever stream the BLAS used) so that work queued
// on `exec` afterwards sees C. The default instance pays nothing extra.
template <class AV, class BV, class CV>
void run_gemm(const char* ta, const char* tb, typename CV::const_value_type alpha, const AV& A, const BV& B,
              typename CV::const_value_type beta, const CV& C, const exec_of<CV>& exec) {
#if EXA_KK_GEMM_TAKES_INSTANCE
  KokkosBlas::gemm(exec, ta, tb, alpha, A, B, beta, C);
#else
  const bool own = is_own_stream(exec);
  if (own) exec.fence();
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
  if (own) Kokkos::fence();
#endif
}

// Row stride of a row-contiguous rank-2 View, for the bf16 path.
template <class V>
index_t bf16_row_stride(const V& v, const char* which) {
  EXA_REQUIRE(v.extent(1) <= 1 || v.stride(1) == 1,
              "exa::gemm: bf16/fp16 products take row-contiguous operands, but {} has stride {} along its rows", which,
              v.stride(1));
  return v.extent(0) <= 1 ? index_t(v.extent(1)) : index_t(v.stride(0));
}

// The operand view `v` as stored (fp32 or bf16), for the reduced-precision paths.
template <class V>
MatmulOperand matmul_operand(const V& v, const char* which) {
  using S = std::remove_cv_t<typename V::value_type>;
  static_assert(std::is_same<S, float>::value || std::is_same<S, bf16>::value,
                "exa::gemm: a bf16/fp16 product's operands are float or exa::bf16");
  return MatmulOperand{v.data(), bf16_row_stride(v, which), std::is_same<S, bf16>::value};
}

// Whether a view holds bf16 (a tensor the model stores in bf16).
template <class V>
constexpr bool holds_bf16 = std::is_same<std::remove_cv_t<typename V::value_type>, bf16>::value;

// Operands stored in bf16 need bf16 products: checked on the calling
// thread, before the grouped products' host tasks (which must not throw).
template <class... Vs>
void require_bf16_products(const char* what) {
  if constexpr ((holds_bf16<Vs> || ...))
    EXA_REQUIRE(matmul_precision() == MatmulPrecision::bf16,
                "{}: an operand is stored in bf16 but the products run in {}: bf16 storage goes with "
                "precision.compute = \"bf16\"",
                what, to_string(matmul_precision()));
}

// The bf16/fp16 form of gemm() (matmul_precision.hpp): on a host space,
// oneDNN; on a device space, a refusal. true when it took the product.
// Operands stored in bf16 only come with bf16 products: an fp32 product
// of them refuses.
template <class AV, class BV, class CV>
bool gemm_reduced_precision(bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, const AV& A,
                            const BV& B, float beta, const CV& C, const exec_of<CV>& exec) {
  const MatmulPrecision p = matmul_precision();
  if (p == MatmulPrecision::fp32) {
    EXA_REQUIRE(!holds_bf16<AV> && !holds_bf16<BV>,
                "exa::gemm: an operand is stored in bf16 but the products run in fp32: bf16 storage goes with "
                "precision.compute = \"bf16\"");
    return false;
  }
  if constexpr (host_task_space<exec_of<CV>>) {
    // oneDNN reads A and B and writes C from this thread: whatever `exec`
    // still has queued on them comes first.
    exec.fence();
    onednn_gemm(p, ta, tb, m, n, k, alpha, matmul_operand(A, "A"), matmul_operand(B, "B"), beta, C.data(),
                bf16_row_stride(C, "C"));
    return true;
  } else {
#if defined(KOKKOS_ENABLE_CUDA)
    if constexpr (std::is_same<exec_of<CV>, Kokkos::Cuda>::value) {
      // cuBLAS on exec's stream, in order with the work queued there.
      cublas_gemm(p, ta, tb, m, n, k, alpha, matmul_operand(A, "A"), matmul_operand(B, "B"), beta, C.data(),
                  bf16_row_stride(C, "C"), exec.cuda_stream());
      return true;
    }
#endif
    (void)exec;
    throw Error(
        "exa::gemm: bf16 and fp16 products are built for host execution spaces (oneDNN) and CUDA (cuBLAS); this "
        "device has no such path yet: set precision.compute = \"fp32\"");
  }
}

}  // namespace detail

// C = alpha * op(A) * op(B) + beta * C, op = identity ('N') or transpose ('T').
// Runs in C's execution space, on `exec`. A, B, C are rank-2 Views (any layout
// Kokkos Kernels accepts; all-LayoutRight or all-LayoutLeft reach the BLAS TPL).
template <class AV, class BV, class CV>
void gemm(char transA, char transB, typename CV::const_value_type alpha, const AV& A, const BV& B,
          typename CV::const_value_type beta, const CV& C, const exec_of<CV>& exec = exec_of<CV>{}) {
  static_assert(AV::rank == 2 && BV::rank == 2 && CV::rank == 2, "exa::gemm: A, B, C must be rank-2 Views");
  using T = typename CV::non_const_value_type;
  static_assert(!(detail::holds_bf16<AV> || detail::holds_bf16<BV>) || std::is_same<T, float>::value,
                "exa::gemm: operands stored in bf16 go with an fp32 result");
  const bool ta = detail::gemm_trans_flag(transA, "transA");
  const bool tb = detail::gemm_trans_flag(transB, "transB");
  const index_t m = ta ? A.extent(1) : A.extent(0);
  const index_t k = ta ? A.extent(0) : A.extent(1);
  const index_t kb = tb ? B.extent(1) : B.extent(0);
  const index_t n = tb ? B.extent(0) : B.extent(1);
  EXA_REQUIRE(k == kb && m == index_t(C.extent(0)) && n == index_t(C.extent(1)),
              "exa::gemm: shapes do not match: op{}(A) is {}x{}, op{}(B) is {}x{}, C is {}x{}", transA, m, k,
              transB, kb, n, C.extent(0), C.extent(1));
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    detail::gemm_scale(C, beta, exec);
    return;
  }
  const char ta_s[2] = {ta ? 'T' : 'N', '\0'};
  const char tb_s[2] = {tb ? 'T' : 'N', '\0'};
  Kokkos::Profiling::pushRegion("exa::gemm");
  bool done = false;
  if constexpr (std::is_same<T, float>::value)
    done = detail::gemm_reduced_precision(ta, tb, m, n, k, alpha, A, B, beta, C, exec);
  if constexpr (!detail::holds_bf16<AV> && !detail::holds_bf16<BV>)
    if (!done) detail::run_gemm(ta_s, tb_s, alpha, A, B, beta, C, exec);
  Kokkos::Profiling::popRegion();
}

// y[N,out] = x[N,in] W[out,in]^T (+ y when accumulate).
template <class XV, class WV, class YV>
void linear_forward(const XV& x, const WV& W, const YV& y, bool accumulate = false,
                    const exec_of<YV>& exec = exec_of<YV>{}) {
  using T = typename YV::non_const_value_type;
  gemm('N', 'T', T(1), x, W, accumulate ? T(1) : T(0), y, exec);
}

// Backward of y = x W^T given dy:
//   dx[N,in]    = dy W            (+= when accumulate_dx; skipped when dx has no data)
//   dW[out,in] (+)= dy^T x        (+= when accumulate_dW)
template <class XV, class WV, class DYV, class DXV, class DWV>
void linear_backward(const XV& x, const WV& W, const DYV& dy, const DXV& dx, const DWV& dW, bool accumulate_dW,
                     bool accumulate_dx = false, const exec_of<DWV>& exec = exec_of<DWV>{}) {
  using T = typename DWV::non_const_value_type;
  if (dx.data() != nullptr) gemm('N', 'N', T(1), dy, W, accumulate_dx ? T(1) : T(0), dx, exec);
  gemm('T', 'N', T(1), dy, x, accumulate_dW ? T(1) : T(0), dW, exec);
}

// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for rank-3 Views [batch, rows, cols].
template <class AV, class BV, class CV>
void gemm_batched(char transA, char transB, typename CV::const_value_type alpha, const AV& A, const BV& B,
                  typename CV::const_value_type beta, const CV& C, const exec_of<CV>& exec = exec_of<CV>{}) {
  static_assert(AV::rank == 3 && BV::rank == 3 && CV::rank == 3,
                "exa::gemm_batched: A, B, C must be rank-3 Views [batch, rows, cols]");
  EXA_REQUIRE(A.extent(0) == C.extent(0) && B.extent(0) == C.extent(0),
              "exa::gemm_batched: batch sizes differ (A {}, B {}, C {})", A.extent(0), B.extent(0), C.extent(0));
  Kokkos::Profiling::pushRegion("exa::gemm_batched");
  for (std::size_t b = 0; b < C.extent(0); ++b) {
    gemm(transA, transB, alpha, Kokkos::subview(A, b, Kokkos::ALL, Kokkos::ALL),
         Kokkos::subview(B, b, Kokkos::ALL, Kokkos::ALL), beta, Kokkos::subview(C, b, Kokkos::ALL, Kokkos::ALL), exec);
  }
  Kokkos::Profiling::popRegion();
}

namespace detail {

// One product of a grouped linear as a host task (host_tasks.hpp): expert
// e, rows [r0, r1) of its group for Y or dX, or rows [o0, o1) of dW[e].
struct GroupTask {
  index_t e, r0, r1, o0, o1;
  bool dw;
  double cost;
};

// Rows per task: a few tasks per thread for balance under the experts'
// uneven loads, none so small that the BLAS runs far below its peak.
inline index_t group_chunk(index_t rows, int threads) {
  const index_t c = (rows + 4 * threads - 1) / (4 * threads);
  return c < 64 ? 64 : c;
}

// Largest first, so that the last tasks handed out are the short ones.
inline void order_tasks(std::vector<GroupTask>& t) {
  std::stable_sort(t.begin(), t.end(), [](const GroupTask& a, const GroupTask& b) { return a.cost > b.cost; });
}

// grouped_linear_forward as host tasks: row chunks of every group, each a
// single-threaded product. false (nothing done) unless host_tasks(exec).
template <class XV, class WV, class YV>
bool grouped_forward_tasks(const XV& X, const WV& W, const std::vector<index_t>& offsets, const YV& Y,
                           bool accumulate, const exec_of<YV>& exec) {
  if (!host_tasks(exec) || !rows_contiguous(X, W, Y)) return false;
  const index_t E = W.extent(0);
  using T = typename YV::non_const_value_type;
  const index_t in = X.extent(1), out = Y.extent(1);
  const index_t chunk = group_chunk(offsets[E], exec.concurrency());
  std::vector<GroupTask> tasks;
  for (index_t e = 0; e < E; ++e)
    for (index_t r = offsets[e]; r < offsets[e + 1]; r += chunk) {
      const index_t r1 = r + chunk < offsets[e + 1] ? r + chunk : offsets[e + 1];
      tasks.push_back({e, r, r1, 0, 0, false, double(r1 - r)});
    }
  order_tasks(tasks);
  const GroupTask* pt = tasks.data();
  const auto* px = X.data();
  const T* pw = W.data();
  T* py = Y.data();
  const int ldx = int(X.stride(0)), ldy = int(Y.stride(0)), ldw = int(W.stride(1));
  const std::size_t we = W.stride(0);
  host_parallel_tasks(exec, "exa::grouped_linear::forward_tasks", int(tasks.size()), [=](const int i, int) {
    const auto& t = pt[i];
    serial_gemm('N', 'T', int(t.r1 - t.r0), int(out), int(in), T(1), px + t.r0 * ldx, ldx, pw + t.e * we, ldw,
                accumulate ? T(1) : T(0), py + t.r0 * ldy, ldy);
  });
  return true;
}

// grouped_linear_backward as host tasks: row chunks of each group's dX
// and, of a like cost, row ranges of each dW[e] (dY[:, o0:o1]^T X over the
// group's rows). false (nothing done) unless host_tasks(exec).
template <class XV, class WV, class DYV, class DXV, class DWV>
bool grouped_backward_tasks(const XV& X, const WV& W, const DYV& dY, const std::vector<index_t>& offsets,
                            const DXV& dX, const DWV& dW, bool accumulate_dW, bool accumulate_dx,
                            const exec_of<DWV>& exec) {
  const bool want_dx = dX.data() != nullptr, want_dw = dW.data() != nullptr;
  if (!host_tasks(exec) || !rows_contiguous(X, W, dY) || (want_dw && !rows_contiguous(dW)) ||
      (want_dx && !rows_contiguous(dX)))
    return false;
  const index_t E = W.extent(0);
  using T = typename DWV::non_const_value_type;
  const index_t in = X.extent(1), out = dY.extent(1);
  const index_t chunk = group_chunk(offsets[E], exec.concurrency());
  std::vector<GroupTask> tasks;
  for (index_t e = 0; e < E; ++e) {
    const index_t n = offsets[e + 1] - offsets[e];
    if (want_dx)
      for (index_t r = offsets[e]; r < offsets[e + 1]; r += chunk) {
        const index_t r1 = r + chunk < offsets[e + 1] ? r + chunk : offsets[e + 1];
        tasks.push_back({e, r, r1, 0, 0, false, double(r1 - r)});
      }
    if (!want_dw || (n == 0 && accumulate_dW)) continue;
    const index_t pieces = n == 0 ? 1 : (n + chunk - 1) / chunk;
    for (index_t p = 0; p < pieces; ++p) {
      const index_t o0 = out * p / pieces, o1 = out * (p + 1) / pieces;
      if (o1 > o0)
        tasks.push_back({e, offsets[e], offsets[e + 1], o0, o1, true, double(n) * double(o1 - o0) / double(out)});
    }
  }
  order_tasks(tasks);
  const GroupTask* pt = tasks.data();
  const auto* px = X.data();
  const T* pw = W.data();
  const auto* pdy = dY.data();
  T* pdx = want_dx ? dX.data() : nullptr;
  T* pdw = dW.data();
  const int ldx = int(X.stride(0)), lddy = int(dY.stride(0)), ldw = int(W.stride(1));
  const int lddw = want_dw ? int(dW.stride(1)) : 1, lddx = want_dx ? int(dX.stride(0)) : 1;
  const std::size_t we = W.stride(0), dwe = want_dw ? dW.stride(0) : 0;
  host_parallel_tasks(exec, "exa::grouped_linear::backward_tasks", int(tasks.size()), [=](const int i, int) {
    const auto& t = pt[i];
    if (t.dw) {
      serial_gemm('T', 'N', int(t.o1 - t.o0), int(in), int(t.r1 - t.r0), T(1), pdy + t.r0 * lddy + t.o0, lddy,
                  px + t.r0 * ldx, ldx, accumulate_dW ? T(1) : T(0), pdw + t.e * dwe + t.o0 * lddw, lddw);
    } else {
      serial_gemm('N', 'N', int(t.r1 - t.r0), int(in), int(out), T(1), pdy + t.r0 * lddy, lddy, pw + t.e * we,
                  ldw, accumulate_dx ? T(1) : T(0), pdx + t.r0 * lddx, lddx);
    }
  });
  return true;
}

}  // namespace detail

// Grouped-by-expert linear: rows offsets[e] .. offsets[e+1] of X belong to
// expert e (host offsets, E+1 entries, E = W.extent(0));
//   Y[rows of e] = X[rows of e] W[e]^T        (+= when accumulate)
// Rows at and beyond offsets[E] are not touched. Empty groups are fine.
template <class XV, class WV, class YV>
void grouped_linear_forward(const XV& X, const WV& W, const std::vector<index_t>& offsets, const YV& Y,
                            bool accumulate = false, const exec_of<YV>& exec = exec_of<YV>{}) {
  static_assert(XV::rank == 2 && WV::rank == 3 && YV::rank == 2,
                "exa::grouped_linear_forward: X[rows,in], W[E,out,in], Y[rows,out]");
  const index_t E = W.extent(0);
  detail::check_group_offsets(offsets, E, X.extent(0), "exa::grouped_linear_forward");
  detail::require_bf16_products<XV>("exa::grouped_linear_forward");
  EXA_REQUIRE(index_t(Y.extent(0)) >= offsets[E],
              "exa::grouped_linear_forward: Y has {} rows, offsets[E] = {}", Y.extent(0), offsets[E]);
  Kokkos::Profiling::pushRegion("exa::grouped_linear::forward");
  if constexpr (host_task_space<exec_of<YV>>) {
    if (detail::grouped_forward_tasks(X, W, offsets, Y, accumulate, exec)) {
      Kokkos::Profiling::popRegion();
      return;
    }
  }
  for (index_t e = 0; e < E; ++e) {
    const auto rows = Kokkos::make_pair(offsets[e], offsets[e + 1]);
    if (rows.first == rows.second) continue;
    linear_forward(Kokkos::subview(X, rows, Kokkos::ALL), Kokkos::subview(W, e, Kokkos::ALL, Kokkos::ALL),
                   Kokkos::subview(Y, rows, Kokkos::ALL), accumulate, exec);
  }
  Kokkos::Profiling::popRegion();
}

// Backward of grouped_linear_forward given dY:
//   dX[rows of e]  = dY[rows of e] W[e]          (+= when accumulate_dx; skipped when dX has no data)
//   dW[e]         (+)= dY[rows of e]^T X[rows of e]   (an empty group gives dW[e] = 0, or leaves it when accumulating;
//                                                    skipped when dW has no data: a frozen weight)
template <class XV, class WV, class DYV, class DXV, class DWV>
void grouped_linear_backward(const XV& X, const WV& W, const DYV& dY, const std::vector<index_t>& offsets,
                             const DXV& dX, const DWV& dW, bool accumulate_dW, bool accumulate_dx = false,
                             const exec_of<DWV>& exec = exec_of<DWV>{}) {
  static_assert(XV::rank == 2 && WV::rank == 3 && DYV::rank == 2 && DXV::rank == 2 && DWV::rank == 3,
                "exa::grouped_linear_backward: X[rows,in], W[E,out,in], dY[rows,out], dX[rows,in], dW[E,out,in]");
  const index_t E = W.extent(0);
  const bool want_dw = dW.data() != nullptr;
  detail::check_group_offsets(offsets, E, X.extent(0), "exa::grouped_linear_backward");
  detail::require_bf16_products<XV, DYV>("exa::grouped_linear_backward");
  EXA_REQUIRE(!want_dw || index_t(dW.extent(0)) == E, "exa::grouped_linear_backward: dW has {} experts, W has {}",
              dW.extent(0), E);
  EXA_REQUIRE(index_t(dY.extent(0)) >= offsets[E], "exa::grouped_linear_backward: dY has {} rows, offsets[E] = {}",
              dY.extent(0), offsets[E]);
  const bool want_dx = dX.data() != nullptr;
  Kokkos::Profiling::pushRegion("exa::grouped_linear::backward");
  if constexpr (host_task_space<exec_of<DWV>>) {
    if (detail::grouped_backward_tasks(X, W, dY, offsets, dX, dW, accumulate_dW, accumulate_dx, exec)) {
      Kokkos::Profiling::popRegion();
      return;
    }
  }
  for (index_t e = 0; e < E; ++e) {
    const auto rows = Kokkos::make_pair(offsets[e], offsets[e + 1]);
    const auto We = Kokkos::subview(W, e, Kokkos::ALL, Kokkos::ALL);
    const auto dYe = Kokkos::subview(dY, rows, Kokkos::ALL);
    using T = typename DWV::non_const_value_type;
    if (want_dx && rows.first != rows.second)
      gemm('N', 'N', T(1), dYe, We, accumulate_dx ? T(1) : T(0), Kokkos::subview(dX, rows, Kokkos::ALL), exec);
    if (want_dw)
      gemm('T', 'N', T(1), dYe, Kokkos::subview(X, rows, Kokkos::ALL), accumulate_dW ? T(1) : T(0),
           Kokkos::subview(dW, e, Kokkos::ALL, Kokkos::ALL), exec);
  }
  Kokkos::Profiling::popRegion();
}

}  // namespace exa::kernels
