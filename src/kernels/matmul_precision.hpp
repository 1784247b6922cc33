#pragma once
// The precision of the matrix products, for the whole process
// (precision.compute; docs/architecture.md, "Mixed precision").
//
//   fp32  the products run in fp32 (the vendor BLAS).
//   bf16  the fp32 inputs of every fp32 product are rounded to bf16 and
//         multiplied with fp32 accumulation into an fp32 result (oneDNN on
//         a host execution space, onednn_matmul.hpp; cuBLAS on CUDA,
//         cublas_matmul.hpp). A bf16 x bf16 product is exact in fp32, so
//         this is bf16 GEMM arithmetic, whatever the ISA.
//   fp16  likewise with IEEE half precision (core/fp16.hpp): its narrow
//         range overflows to infinity, which dynamic loss scaling watches.
//
// One setting per process, not per call: every product of a step follows
// it, so the model code does not thread a flag through each layer. Products
// that must stay fp32 (the router's logits) are computed without gemm().
// Set it once before the first step; tests switch it with
// ScopedMatmulPrecision.
#include <cstdint>
#include <string>

namespace exa::kernels {

enum class MatmulPrecision { fp32, bf16, fp16 };

// One operand of a reduced-precision product as it is stored: row-major
// values with row stride `ld`, fp32, or bf16 for a tensor the model keeps
// in bf16 (docs/architecture.md, "Mixed precision"). A bf16 product reads
// a bf16 operand as it is: the rounding an fp32 operand goes through has
// already happened, so the product is the same bit for bit.
struct MatmulOperand {
  const void* data = nullptr;
  std::int64_t ld = 0;
  bool bf16 = false;
};

MatmulPrecision matmul_precision();
void set_matmul_precision(MatmulPrecision p);
const char* to_string(MatmulPrecision p);

class ScopedMatmulPrecision {
 public:
  explicit ScopedMatmulPrecision(MatmulPrecision p) : saved_(matmul_precision()) { set_matmul_precision(p); }
  ~ScopedMatmulPrecision() { set_matmul_precision(saved_); }
  ScopedMatmulPrecision(const ScopedMatmulPrecision&) = delete;
  ScopedMatmulPrecision& operator=(const ScopedMatmulPrecision&) = delete;

 private:
  MatmulPrecision saved_;
};

}  // namespace exa::kernels
