#pragma once
// Independent tasks on the threads of a host execution space, each task
// running its BLAS products single-threaded (kernels/README.md, "Host
// threads"). A per-call threaded BLAS scales poorly on the small products
// of attention heads and of lightly loaded experts (1.3-1.7x on 2 threads);
// whole tasks per thread keep every thread on its own products.
//
// Used when host_tasks(exec): a host space with more than one thread and
// Kokkos Kernels' BLAS TPL (whose host BLAS is called directly; an OpenMP
// BLAS runs single-threaded inside a parallel region, as OpenBLAS' OpenMP
// build and MKL do). Otherwise the callers keep their one-product-at-a-time
// path, which lets the BLAS use the threads.
// Kokkos_Core.hpp brings UniqueToken; Kokkos 4 refuses its own header by name.
#include <Kokkos_Core.hpp>
#include <KokkosKernels_config.h>

#include <type_traits>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/matmul_precision.hpp"
#include "kernels/onednn_matmul.hpp"

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
#include <KokkosBlas_Host_tpl.hpp>
#endif

namespace exa::kernels {

// Host execution spaces only: callers test it with `if constexpr` so that a
// device space never instantiates the host-lambda task loop.
template <class Exec>
constexpr bool host_task_space = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

template <class Exec>
bool host_tasks(const Exec& exec) {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  return host_task_space<Exec> && exec.concurrency() > 1;
#else
  (void)exec;
  return false;
#endif
}

// Row-major C[m,n] = alpha op(A) op(B) + beta C on the calling thread
// (lda, ldb, ldc: row strides). Only where host_tasks() holds. fp32 under
// matmul_precision() == bf16 or fp16 goes to oneDNN, single-threaded here,
// and so do operands stored in bf16 (TA or TB = exa::bf16), which need bf16
// products.
template <class T, class TA, class TB>
void serial_gemm(char ta, char tb, int m, int n, int k, T alpha, const TA* A, int lda, const TB* B, int ldb, T beta,
                 T* C, int ldc) {
  constexpr bool stored_bf16 = std::is_same<TA, bf16>::value || std::is_same<TB, bf16>::value;
  static_assert(!stored_bf16 || std::is_same<T, float>::value,
                "exa::kernels::serial_gemm: operands stored in bf16 go with an fp32 result");
  if constexpr (std::is_same<T, float>::value) {
    const MatmulPrecision p = matmul_precision();
    if (p != MatmulPrecision::fp32) {
      onednn_gemm(p, ta == 'T' || ta == 't', tb == 'T' || tb == 't', m, n, k, alpha,
                  MatmulOperand{A, lda, std::is_same<TA, bf16>::value}, MatmulOperand{B, ldb, std::is_same<TB, bf16>::value},
                  beta, C, ldc);
      return;
    }
    if constexpr (stored_bf16)
      throw Error(
          "exa::kernels::serial_gemm: an operand is stored in bf16 but the products run in fp32: bf16 storage goes "
          "with precision.compute = \"bf16\"");
  }
  if constexpr (!stored_bf16) {
    static_assert(std::is_same<TA, T>::value && std::is_same<TB, T>::value,
                  "exa::kernels::serial_gemm: fp32/fp64 operands have C's type");
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    KokkosBlas::Impl::HostBlas<T>::gemm(tb, ta, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc);
#else
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
        (void)C, (void)ldc;
    Kokkos::abort("exa::kernels::serial_gemm needs Kokkos Kernels' BLAS TPL");
#endif
  }
}

// Scratch slots for host_parallel_tasks: one per thread that may run a task.
template <class Exec>
int host_task_slots(const Exec& exec) {
  return host_tasks(exec) ? Kokkos::Experimental::UniqueToken<Exec>(exec).size() : 1;
}

// task(t, slot) for t in [0, n) on the threads of `exec`, handed out one at
// a time as threads come free (give the largest first for balance); slot
// in [0, host_task_slots(exec)) is this thread's.
template <class Exec, class F>
void host_parallel_tasks(const Exec& exec, const char* label, int n, const F& task) {
  Kokkos::Experimental::UniqueToken<Exec> token(exec);
  using Policy = Kokkos::RangePolicy<Exec, Kokkos::Schedule<Kokkos::Dynamic>>;
  Kokkos::parallel_for(label, Policy(exec, 0, n).set_chunk_size(1), [=](const int t) {
    const int slot = token.acquire();
    task(t, slot);
    token.release(slot);
  });
}

}  // namespace exa::kernels
