#include "kernels/matmul_precision.hpp"

#include <atomic>

namespace exa::kernels {

namespace {
// Read by the host threads of a grouped product's tasks, so atomic.
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::fp32};
}  // namespace

MatmulPrecision matmul_precision() { return g_precision.load(std::memory_order_relaxed); }

void set_matmul_precision(MatmulPrecision p) { g_precision.store(p, std::memory_order_relaxed); }

const char* to_string(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::bf16: return "bf16";
    case MatmulPrecision::fp16: return "fp16";
    default: return "fp32";
  }
}

}  // namespace exa::kernels
