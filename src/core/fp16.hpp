#pragma once
// IEEE binary16 rounding of fp32 values, for precision.compute = "fp16".
//
// ExaMoE keeps fp16 operands as the fp32 values they round to: an fp16 x
// fp16 product (11-bit significands) is exact in fp32, so a product of
// rounded operands with fp32 accumulation is fp16 GEMM arithmetic. What
// matters is the rounding itself, including its range: magnitudes from
// 65520 up become infinity (the overflow that dynamic loss scaling
// watches for), and below 2^-14 the spacing is fixed at 2^-24 (gradual
// underflow), so small gradients lose their digits unless scaled up.
#include <cmath>
#include <cstdint>

#include "core/kokkos_shims.hpp"

namespace exa {

// The fp16 value nearest to f (ties to even), as a float. NaN stays NaN.
inline float round_to_fp16(float f) {
  const std::uint32_t u = kx::bits_of(f);
  const std::uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return f;  // inf, NaN
  if (a < 0x38800000u) {           // |f| < 2^-14: fp16 subnormals, spacing 2^-24
    const float q = std::nearbyint(kx::float_of(a) * 16777216.0f) * (1.0f / 16777216.0f);
    return kx::float_of(sign | kx::bits_of(q));
  }
  // Drop 13 of the 23 significand bits, to nearest even; a carry moves
  // into the exponent as it should.
  const std::uint32_t r = (a + 0x0fffu + ((a >> 13) & 1u)) & ~0x1fffu;
  if (r >= 0x47800000u) return kx::float_of(sign | 0x7f800000u);  // >= 65536 after rounding: overflow
  return kx::float_of(sign | r);
}

}  // namespace exa
