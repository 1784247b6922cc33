#pragma once
// bfloat16 storage type with round-to-nearest-even conversion from fp32.
//
// Kokkos 3.4 has no bhalf_t, so ExaMoE carries its own 16-bit type: the top
// half of an IEEE binary32. Arithmetic is done in fp32; bf16 is a storage
// and communication format only.
#include <type_traits>

#include "core/kokkos_shims.hpp"

namespace exa {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  // Explicit both ways, so that a kernel written for any value type can
  // load with float(v) and store with T(f), while nothing converts
  // silently: bf16(f) rounds (to_bf16), float(h) is exact (to_float).
  KOKKOS_FORCEINLINE_FUNCTION explicit bf16(float f);
  KOKKOS_FORCEINLINE_FUNCTION explicit operator float() const;

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

KOKKOS_FORCEINLINE_FUNCTION bf16::bf16(float f) : bits(to_bf16(f).bits) {}
KOKKOS_FORCEINLINE_FUNCTION bf16::operator float() const { return to_float(*this); }

// The type arithmetic on values of T runs in: float for bf16, T otherwise.
template <class T>
struct arith {
  using type = T;
};
template <>
struct arith<bf16> {
  using type = float;
};
template <class T>
using arith_t = typename arith<std::remove_cv_t<T>>::type;

}  // namespace exa
