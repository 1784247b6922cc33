#pragma once
// Host fast paths of the element-wise kernels (AdamW, SwiGLU, RMSNorm,
// cross-entropy, permute), docs/architecture.md "Performance method". On a
// host execution space a kernel hands contiguous chunks or rows of its data
// to a plain loop over raw pointers that the compiler vectorises (with
// EXAMOE_ARCH's AVX2/FMA or AVX-512); Kokkos spreads the chunks over the
// threads. Device spaces, and Views whose rows are strided, keep the
// element-per-thread kernels.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels::detail {

// True when Exec runs on the host (Serial, OpenMP, Threads).
template <class Exec>
constexpr bool host_exec = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

// Elements per chunk: large enough that a chunk amortises the dispatch, small
// enough that 2 threads split a 1M-element tensor evenly.
constexpr index_t kHostChunk = 8192;

// Calls f(i0, i1) for the chunks [i0, i1) of [0, total), in parallel on exec.
template <class Exec, class F>
void for_host_chunks(const char* label, const Exec& exec, index_t total, const F& f) {
  const index_t chunks = (total + kHostChunk - 1) / kHostChunk;
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec>(exec, 0, chunks), [=](const index_t c) {
    const index_t i0 = c * kHostChunk;
    f(i0, i0 + kHostChunk < total ? i0 + kHostChunk : total);
  });
}

// True when each View's rows are contiguous (unit stride in its last
// dimension; any other strides), so that a row is a plain array.
template <class... Vs>
bool rows_contiguous(const Vs&... vs) {
  return ((vs.extent(std::size_t(Vs::rank) - 1) <= 1 || vs.stride(std::size_t(Vs::rank) - 1) == 1) && ...);
}

// exp for the host loops. For float, Cephes' expf (exp(r) * 2^n with
// n = round(x / ln 2), r = x - n ln 2 in two parts, a degree-6 polynomial
// for exp(r)): within 1.5 ulp of expf, NaN stays NaN, inf above
// 88.376 and 0 below -87.337 (libm's expf is finite up to 88.72 and
// denormal down to -103.9; nothing here depends on either end). Written
// without branches or calls so that a loop over it vectorises (GCC needs
// -fno-trapping-math for the selects, cmake/ExaMoEArch.cmake); libm's is
// a call per element. double keeps std::exp.
// exp(r) * 2^n of an argument already in [lo, hi] (host_exp's body).
inline float host_exp_in_range(float xc) {
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23: t's low mantissa bits hold round(xc / ln 2)
  const float t = xc * 1.44269504088896341f + magic;
  const float n = t - magic;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // Unsigned: for a NaN or an infinite t the exponent arithmetic wraps
  // (the product is NaN or clamped anyway), where int32 would overflow (UB).
  std::uint32_t ti;
  std::memcpy(&ti, &t, sizeof ti);
  const std::uint32_t bits = (ti - 0x4B400000u + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
constexpr float kHostExpHi = 88.3762626647949f, kHostExpLo = -87.3365447504020f;
inline float host_exp(float x) {
  const float x_lo = x < kHostExpLo ? kHostExpLo : x;
  const float xc = x_lo > kHostExpHi ? kHostExpHi : x_lo;
  const float y = host_exp_in_range(xc);
  return x > kHostExpHi ? std::numeric_limits<float>::infinity() : x < kHostExpLo ? 0.0f : y;
}
// exp of x <= 0 (a logit less its row's max), for sums, as 2^(x log2 e):
// n = round(t), 2^(t - n) by Cephes' exp2f polynomial (1.7e-7 relative),
// times 2^n. Eight multiply-adds per element where host_exp_in_range needs
// eleven (its two-part reduction and its final r^2 term), in a loop bound
// by them. Rounding t = x log2 e costs |x| * 6e-8 relative in a term
// weighted e^x, so a sum of terms >= 1 moves by ~1e-7 relative at most.
// No overflow select; below 2^-125 (x < -86.6) it returns ~2e-38, not 0,
// which no such sum can tell apart. NaN stays NaN.
// kExp2Poly holds the polynomial's coefficients, highest degree first, and
// kExp2Floor the clamp of t: ce_row_simd.hpp's vector form uses the same.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kExp2Floor = -125.0f;
constexpr float kExp2Poly[7] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};
inline float host_exp_nonpositive(float x) {
  float t = x * kLog2e;
  t = t < kExp2Floor ? kExp2Floor : t;
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23: tm's low mantissa bits hold round(t)
  const float tm = t + magic;
  const float f = t - (tm - magic);
  float p = kExp2Poly[0];
  p = p * f + kExp2Poly[1];
  p = p * f + kExp2Poly[2];
  p = p * f + kExp2Poly[3];
  p = p * f + kExp2Poly[4];
  p = p * f + kExp2Poly[5];
  p = p * f + kExp2Poly[6];
  std::uint32_t ti;  // unsigned, as in host_exp_in_range
  std::memcpy(&ti, &tm, sizeof ti);
  const std::uint32_t bits = (ti - 0x4B400000u + 127u) << 23;  // 2^round(t)
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double host_exp_nonpositive(double x) { return std::exp(x); }
inline double host_exp(double x) { return std::exp(x); }

// sum_j a[j] * b[j] over 16 running partial sums (a vectorisable order;
// a single running sum is a dependency chain the compiler may not reorder).
template <class T, class A, class B>
inline T dot16(const A* a, const B* b, index_t n) {
  T acc[16] = {};
  index_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += T(a[j + l]) * T(b[j + l]);
  T s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; j < n; ++j) s += T(a[j]) * T(b[j]);
  return s;
}

// sum_j a[j] over 16 running partial sums, as dot16.
template <class T>
inline T sum16(const T* a, index_t n) {
  T acc[16] = {};
  index_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[j + l];
  T s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; j < n; ++j) s += a[j];
  return s;
}

}  // namespace exa::kernels::detail
