#pragma once
// bf16 and fp16 matrix products, and TF32 fp32 ones, on CUDA through cuBLAS
// (precision.compute, precision.matmul; matmul_precision.hpp), the device
// counterpart of onednn_matmul.hpp.
//
// The fp32 operands are rounded (to nearest, ties to even) into device
// scratch on the caller's stream, and cublasGemmEx multiplies them with an
// fp32 compute type into the fp32 C, alpha and beta applied: bf16 (or fp16)
// GEMM arithmetic on the tensor cores. TF32 is cuBLAS's math mode for fp32
// products (CUBLAS_TF32_TENSOR_OP_MATH), set on the handle Kokkos Kernels'
// gemm uses, so every fp32 exa::gemm follows it; products that must stay
// fp32 (the router's logits) do not go through gemm.
//
// The handle is Kokkos Kernels' own (its cuBLAS TPL): a build whose Kokkos
// Kernels lacks that TPL, or a build without CUDA, has none of this, and
// cublas_available() says so.
#include <string>

#include "core/types.hpp"
#include "kernels/matmul_precision.hpp"

namespace exa::kernels {

// Whether this build can run reduced-precision and TF32 products on CUDA.
bool cublas_available();

// Why not, with the fix (empty when cublas_available()).
std::string cublas_missing();

// Row-major C[m,n] = alpha op(A) op(B) + beta C on the device (op(A) is
// m x k, op(B) k x n; lda, ldb, ldc are row strides), the operands rounded
// to p (bf16 or fp16), fp32 accumulation, on `stream` (a cudaStream_t; null:
// the default stream). Throws where !cublas_available().
void cublas_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, const float* A,
                 index_t lda, const float* B, index_t ldb, float beta, float* C, index_t ldc, void* stream);
// The same with operands that may be stored in bf16 (read in place; p must
// then be bf16).
void cublas_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, MatmulOperand A,
                 MatmulOperand B, float beta, float* C, index_t ldc, void* stream);

// precision.matmul = "tf32": fp32 products on the TF32 tensor cores (on),
// or in fp32 (off, the default). Throws where !cublas_available().
void cublas_set_tf32(bool on);
bool cublas_tf32();

}  // namespace exa::kernels
