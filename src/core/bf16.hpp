#pragma once
// bfloat16 storage type with round-to-nearest-even conversion from fp32.
//
// Kokkos 3.4 has no bhalf_t, so ExaMoE carries its own 16-bit type: the top
// half of an IEEE binary32. Arithmetic is done in fp32; bf16 is a storage
// and communication format only.
#include "core/kokkos_shims.hpp"

namespace exa {

struct bf16 {
  std::uint16_t bits = 0;

  KOKKOS_FORCEINLINE_FUNCTION static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};

// Round to nearest, ties to even. NaN stays NaN (quiet bit forced so that a
// NaN whose payload lives only in the low half does not become infinity).
KOKKOS_FORCEINLINE_FUNCTION bf16 to_bf16(float f) {
  const std::uint32_t u = kx::bits_of(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0u) {
    return bf16::from_bits(static_cast<std::uint16_t>((u >> 16) | 0x0040u));
  }
  const std::uint32_t lsb = (u >> 16) & 1u;
  const std::uint32_t rounded = u + 0x7fffu + lsb;
  return bf16::from_bits(static_cast<std::uint16_t>(rounded >> 16));
}

KOKKOS_FORCEINLINE_FUNCTION float to_float(bf16 h) {
  return kx::float_of(static_cast<std::uint32_t>(h.bits) << 16);
}

}  // namespace exa
