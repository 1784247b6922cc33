#include "model/precision.hpp"

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/cublas_matmul.hpp"
#include "kernels/onednn_matmul.hpp"

namespace exa::model {

namespace {
// Kokkos' accessibility says whether the model's tensors live on the host.
constexpr bool kHost = Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}  // namespace

kernels::MatmulPrecision matmul_precision_of(const deck::Config& cfg) {
  const std::string compute = cfg.get_string("precision.compute");
  if (compute == "fp32") return kernels::MatmulPrecision::fp32;
  EXA_REQUIRE(compute == "bf16" || compute == "fp16",
              "precision.compute = \"{}\": this build runs fp32, bf16 and fp16; use one of them", compute);
  std::string why;
  if (!kHost && !kernels::cublas_available())
    why = fmt::format("this build runs on {}, and reduced-precision products are built for CPUs (oneDNN) and "
                      "CUDA (cuBLAS): {}",
                      ExecSpace::name(), kernels::cublas_missing());
  else if (kHost && !kernels::onednn_available())
    why = kernels::onednn_missing();
  EXA_REQUIRE(why.empty(), "precision.compute = \"{}\": {}; or set precision.compute = \"fp32\"", compute, why);
  return compute == "bf16" ? kernels::MatmulPrecision::bf16 : kernels::MatmulPrecision::fp16;
}

bool tf32_of(const deck::Config& cfg) {
  if (cfg.get_string("precision.matmul") != "tf32") return false;
  EXA_REQUIRE(!kHost && kernels::cublas_available(),
              "precision.matmul = \"tf32\": TF32 is the arithmetic of a GPU's tensor cores (cuBLAS), and this build "
              "runs on {}{}; set precision.matmul = \"fp32\"",
              ExecSpace::name(), kHost ? "" : ": " + kernels::cublas_missing());
  return true;
}

void use_deck_precision(const deck::Config& cfg) {
  const auto p = matmul_precision_of(cfg);
  const bool tf32 = tf32_of(cfg);  // both checked before either is set
  kernels::set_matmul_precision(p);
  if (tf32 || kernels::cublas_tf32()) kernels::cublas_set_tf32(tf32);
  // So that a bf16 run uses the cores an fp32 run would, and
  // thread_check's warnings hold.
  if (p != kernels::MatmulPrecision::fp32) kernels::onednn_match_blas_threads();
}

std::string describe_precision() {
  const auto p = kernels::matmul_precision();
  if (p == kernels::MatmulPrecision::fp32)
    return kernels::cublas_tf32() ? "fp32 matmuls on TF32 tensor cores (cuBLAS)" : "fp32 matmuls";
  if (!kHost) return fmt::format("{} matmuls (cuBLAS, fp32 accumulation)", kernels::to_string(p));
  if (p == kernels::MatmulPrecision::fp16)
    return "fp16 matmuls (inputs rounded to fp16, fp32 products and accumulation on oneDNN's fp32 kernels: fp16 "
           "numerics at fp32 speed)";
  std::string s = "bf16 matmuls (" + kernels::onednn_describe() + ")";
  if (!kernels::onednn_native_bf16())
    s += "; WARNING: this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 products run no faster than "
         "fp32 ones";
  return s;
}

}  // namespace exa::model
