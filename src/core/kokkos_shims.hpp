#pragma once
// Portability layer over Kokkos 3.4 .. 4.x, usable on host and in CUDA code.
//
// Kokkos 3.4 keeps its math functions and numeric traits in
// Kokkos::Experimental; 3.7 moved the math functions to Kokkos:: and 4.x
// dropped the Experimental spellings for several of them. min/max arrived
// in Kokkos:: only in 3.7. Kernels call exa::kx::* and never the Kokkos
// spelling, so one source compiles against every version.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#ifndef KOKKOS_VERSION
#error "Kokkos_Core.hpp must define KOKKOS_VERSION"
#endif
#if KOKKOS_VERSION < 30400
#error "ExaMoE needs Kokkos >= 3.4"
#endif

#if KOKKOS_VERSION >= 30700
#define EXA_KOKKOS_MATH_NS Kokkos
#else
#define EXA_KOKKOS_MATH_NS Kokkos::Experimental
#endif

namespace exa {
namespace kx {

#define EXA_SHIM_UNARY(F)                         \
  template <class T>                              \
  KOKKOS_FORCEINLINE_FUNCTION auto F(T x) {       \
    return EXA_KOKKOS_MATH_NS::F(x);              \
  }
EXA_SHIM_UNARY(exp)
EXA_SHIM_UNARY(log)
EXA_SHIM_UNARY(log1p)
EXA_SHIM_UNARY(sqrt)
EXA_SHIM_UNARY(sin)
EXA_SHIM_UNARY(cos)
EXA_SHIM_UNARY(tanh)
EXA_SHIM_UNARY(fabs)
EXA_SHIM_UNARY(floor)
EXA_SHIM_UNARY(ceil)
#undef EXA_SHIM_UNARY

template <class T>
KOKKOS_FORCEINLINE_FUNCTION T pow(T x, T y) {
  return EXA_KOKKOS_MATH_NS::pow(x, y);
}

template <class T>
KOKKOS_FORCEINLINE_FUNCTION T rsqrt(T x) {
  return T(1) / EXA_KOKKOS_MATH_NS::sqrt(x);
}

template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr const T& max(const T& a, const T& b) {
  return (a < b) ? b : a;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr const T& min(const T& a, const T& b) {
  return (b < a) ? b : a;
}

// isfinite without relying on Kokkos 3.4's missing predicate under nvcc:
// a finite value minus itself is zero; inf and NaN give NaN.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION bool isfinite(T x) {
  return (x - x) == (x - x);
}

// Numeric traits (Kokkos::Experimental in every version up to 4.x).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr T infinity() {
  return Kokkos::Experimental::infinity<T>::value;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr T lowest() {
  return -Kokkos::Experimental::finite_max<T>::value;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr T finite_max() {
  return Kokkos::Experimental::finite_max<T>::value;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION constexpr T epsilon() {
  return Kokkos::Experimental::epsilon<T>::value;
}

// Bit casts usable in device code (memcpy is allowed there by nvcc).
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
KOKKOS_FORCEINLINE_FUNCTION float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
KOKKOS_FORCEINLINE_FUNCTION std::uint64_t bits_of(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

}  // namespace kx

using half_t = Kokkos::Experimental::half_t;

}  // namespace exa
