#include "kernels/cublas_matmul.hpp"

#include <Kokkos_Core.hpp>
#include <KokkosKernels_config.h>

#include "core/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
#define EXA_CUBLAS_MATMUL 1
#include <KokkosBlas_tpl_spec.hpp>
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "core/bf16.hpp"
#else
#define EXA_CUBLAS_MATMUL 0
#endif

namespace exa::kernels {

#if EXA_CUBLAS_MATMUL

namespace {

void check(cublasStatus_t s, const char* what) {
  EXA_REQUIRE(s == CUBLAS_STATUS_SUCCESS, "cuBLAS: {} failed (status {})", what, int(s));
}
void check(cudaError_t e, const char* what) {
  EXA_REQUIRE(e == cudaSuccess, "CUDA: {} failed: {}", what, cudaGetErrorString(e));
}

cublasHandle_t handle() { return KokkosBlas::Impl::CudaBlasSingleton::singleton().handle; }

// rows x cols of src (row stride ld) rounded into dst, packed (row stride
// cols): bf16 or IEEE fp16 bits, to nearest, ties to even.
template <bool Fp16>
__global__ void round_operand(const float* src, index_t rows, index_t cols, index_t ld, std::uint16_t* dst) {
  const index_t n = rows * cols, step = index_t(blockDim.x) * gridDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const index_t r = i / cols, c = i - r * cols;
    const float x = src[r * ld + c];
    if constexpr (Fp16)
      dst[i] = __half_as_ushort(__float2half_rn(x));
    else
      dst[i] = to_bf16(x).bits;
  }
}

void round_into(MatmulPrecision p, const float* src, index_t rows, index_t cols, index_t ld, std::uint16_t* dst,
                cudaStream_t s) {
  const index_t n = rows * cols;
  const int threads = 256;
  const int blocks = int(std::min<index_t>((n + threads - 1) / threads, 4096));
  if (p == MatmulPrecision::fp16)
    round_operand<true><<<blocks, threads, 0, s>>>(src, rows, cols, ld, dst);
  else
    round_operand<false><<<blocks, threads, 0, s>>>(src, rows, cols, ld, dst);
  check(cudaGetLastError(), "rounding a product's operand");
}

// The rounded operands' device buffers, grown as the products grow and
// freed when Kokkos finalizes. The buffers are shared by every stream: a
// product on another stream than the last one makes its stream wait for
// the last product's event first, so it never overwrites operands a
// queued product still reads.
class Scratch {
 public:
  static Scratch& get() {
    static Scratch* s = [] {
      auto* p = new Scratch;
      Kokkos::push_finalize_hook([p] { p->release(); });
      return p;
    }();
    return *s;
  }
  std::mutex mutex;
  std::uint16_t* a(std::size_t n) { return grow(a_, a_n_, n); }
  std::uint16_t* b(std::size_t n) { return grow(b_, b_n_, n); }
  void use(cudaStream_t s) {
    if (used_ && s != last_) check(cudaStreamWaitEvent(s, done_, 0), "waiting for the previous product");
    used_ = true;
    last_ = s;
  }
  // After the product that read the buffers was queued on s.
  void done(cudaStream_t s) {
    if (done_ == nullptr) check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done_, s), "cudaEventRecord");
  }

 private:
  std::uint16_t* grow(std::uint16_t*& p, std::size_t& have, std::size_t n) {
    if (n <= have) return p;
    if (p != nullptr) {
      check(cudaDeviceSynchronize(), "waiting before freeing operand scratch");  // queued products may read it
      check(cudaFree(p), "freeing operand scratch");
    }
    p = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(std::uint16_t)), "allocating operand scratch");
    have = n;
    return p;
  }
  void release() {
    cudaDeviceSynchronize();
    if (a_ != nullptr) cudaFree(a_);
    if (b_ != nullptr) cudaFree(b_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    a_ = b_ = nullptr;
    done_ = nullptr;
    a_n_ = b_n_ = 0;
    used_ = false;
  }
  std::uint16_t *a_ = nullptr, *b_ = nullptr;
  std::size_t a_n_ = 0, b_n_ = 0;
  cudaStream_t last_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool used_ = false;
};

bool g_tf32 = false;

}  // namespace

bool cublas_available() { return true; }

std::string cublas_missing() { return ""; }

void cublas_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, const float* A,
                 index_t lda, const float* B, index_t ldb, float beta, float* C, index_t ldc, void* stream) {
  cublas_gemm(p, ta, tb, m, n, k, alpha, MatmulOperand{A, lda, false}, MatmulOperand{B, ldb, false}, beta, C, ldc,
              stream);
}

void cublas_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, MatmulOperand A,
                 MatmulOperand B, float beta, float* C, index_t ldc, void* stream) {
  EXA_REQUIRE(p != MatmulPrecision::fp32, "cublas_gemm: takes bf16 or fp16 products; fp32 ones go to the BLAS");
  EXA_REQUIRE(p == MatmulPrecision::bf16 || (!A.bf16 && !B.bf16),
              "cublas_gemm: a tensor stored in bf16 is an operand of an fp16 product; bf16 storage goes with bf16 "
              "products only");
  const auto s = static_cast<cudaStream_t>(stream);
  // Row-major operands: A is (ta ? k x m : m x k), B is (tb ? n x k : k x
  // n); an fp32 one is rounded into packed scratch, a bf16 one read in place.
  const index_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  Scratch& sc = Scratch::get();
  std::lock_guard<std::mutex> lock(sc.mutex);
  sc.use(s);
  const void* a = A.data;
  const void* b = B.data;
  index_t a_ld = A.ld, b_ld = B.ld;
  if (!A.bf16) {
    std::uint16_t* pa = sc.a(std::size_t(a_rows * a_cols));
    round_into(p, static_cast<const float*>(A.data), a_rows, a_cols, A.ld, pa, s);
    a = pa, a_ld = a_cols;
  }
  if (!B.bf16) {
    std::uint16_t* pb = sc.b(std::size_t(b_rows * b_cols));
    round_into(p, static_cast<const float*>(B.data), b_rows, b_cols, B.ld, pb, s);
    b = pb, b_ld = b_cols;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
  // packed row-major X is the column-major X^T: so B comes first, each
  // transposed as the caller asked.
  const cudaDataType_t type = p == MatmulPrecision::fp16 ? CUDA_R_16F : CUDA_R_16BF;
  cublasHandle_t h = handle();
  cudaStream_t before = nullptr;
  check(cublasGetStream(h, &before), "cublasGetStream");
  check(cublasSetStream(h, s), "cublasSetStream");
  check(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");  // alpha, beta on the host
  const cublasStatus_t st =
      cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                   b, type, int(b_ld), a, type, int(a_ld), &beta, C, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  // Kokkos Kernels 3.4 calls cuBLAS without setting the stream: the
  // handle goes back to the one it had.
  check(cublasSetStream(h, before), "cublasSetStream");
  check(st, "cublasGemmEx (bf16/fp16 inputs, fp32 compute)");
  sc.done(s);
}

void cublas_set_tf32(bool on) {
  check(cublasSetMathMode(handle(), on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  g_tf32 = on;
}

bool cublas_tf32() { return g_tf32; }

#else

bool cublas_available() { return false; }

std::string cublas_missing() {
#if defined(KOKKOS_ENABLE_CUDA)
  return "this build's Kokkos Kernels has no cuBLAS TPL (rebuild it with KokkosKernels_ENABLE_TPL_CUBLAS=ON, as "
         "scripts/build-kokkos.sh cuda does)";
#else
  return "this build has no CUDA (its Kokkos runs on the host), so it has no cuBLAS";
#endif
}

void cublas_gemm(MatmulPrecision, bool, bool, index_t, index_t, index_t, float, const float*, index_t, const float*,
                 index_t, float, float*, index_t, void*) {
  throw Error("cublas_gemm: " + cublas_missing());
}

void cublas_gemm(MatmulPrecision, bool, bool, index_t, index_t, index_t, float, MatmulOperand, MatmulOperand, float,
                 float*, index_t, void*) {
  throw Error("cublas_gemm: " + cublas_missing());
}

void cublas_set_tf32(bool on) {
  if (on) throw Error("precision.matmul = \"tf32\": " + cublas_missing() + "; set precision.matmul = \"fp32\"");
}

bool cublas_tf32() { return false; }

#endif

}  // namespace exa::kernels
