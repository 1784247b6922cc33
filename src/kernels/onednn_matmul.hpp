#pragma once
// bf16 and fp16 matrix products on host execution spaces through oneDNN's
// matmul primitive (precision.compute; matmul_precision.hpp).
//
// The fp32 operands are rounded (to nearest, ties to even; core/bf16.hpp,
// core/fp16.hpp) into per-thread scratch, multiplied with fp32
// accumulation, and written to the fp32 C with alpha and beta applied
// (oneDNN's output scale and sum post-op). Each thread creates a primitive
// once per (precision, transposes, alpha, beta), with the shapes left to
// execution time, and reuses it: the expert products change shape every
// step. bf16 operands go to oneDNN's bf16 kernels; fp16 operands are kept
// as the fp32 values they round to and go to its fp32 kernels (CPUs
// without AVX512-FP16 have no fp16 arithmetic): fp16 numerics, fp32 speed.
//
// Called from a thread of a host parallel region (the host tasks of
// host_tasks.hpp), oneDNN runs single-threaded, as a threaded BLAS does.
#include <string>

#include "core/types.hpp"
#include "kernels/matmul_precision.hpp"

namespace exa::kernels {

// Whether this build has oneDNN (EXAMOE_ENABLE_ONEDNN).
bool onednn_available();

// What a build without oneDNN says when asked for bf16/fp16 products, with
// the fix: "bf16 and fp16 products need oneDNN, ... reconfigure ...".
const char* onednn_missing();

// Row-major C[m,n] = alpha op(A) op(B) + beta C (op(A) is m x k, op(B)
// k x n; lda, ldb, ldc are row strides) with the operands rounded to p
// (bf16 or fp16) and fp32 accumulation. Throws when the build has no oneDNN.
void onednn_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, const float* A,
                 index_t lda, const float* B, index_t ldb, float beta, float* C, index_t ldc);
// The same with operands that may be stored in bf16 (read in place; p must
// then be bf16, fp16 products refuse them).
void onednn_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, MatmulOperand A,
                 MatmulOperand B, float beta, float* C, index_t ldc);

// What the products run on, e.g. "oneDNN 2.6.3 gemm:jit, AVX512-BF16"
// (oneDNN's implementation and the instruction set it dispatches to); ""
// when the build has no oneDNN.
std::string onednn_describe();

// Gives oneDNN, for products called outside a parallel region, the
// threads the fp32 BLAS has. oneDNN runs on OpenMP: in an OpenMP Kokkos
// build it shares Kokkos' threads (OMP_NUM_THREADS) and this does nothing,
// but in a Serial build nothing else sets its count, and it would take
// every core of the node in each rank; there it gets the BLAS's count
// (OPENBLAS_NUM_THREADS), so that oneDNN and the BLAS run on the same
// cores. Every driver that runs bf16 products (model/precision.cpp) and
// `examoe-plan calibrate` call it. No-op without oneDNN.
void onednn_match_blas_threads();

// True when the CPU multiplies bf16 natively (AVX512-BF16 or AMX). Without
// it oneDNN still computes bf16 products, through conversions, slower than
// fp32.
bool onednn_native_bf16();

}  // namespace exa::kernels
