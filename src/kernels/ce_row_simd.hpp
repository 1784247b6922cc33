#pragma once
// The cross-entropy forward's row sums (max_j l_j, sum_j exp(l_j - max)) of
// one contiguous float row, in explicit AVX-512 or AVX2+FMA vectors, for
// builds whose target has them (EXAMOE_ARCH, or Kokkos' host arch) and that
// are not compiled by nvcc. The auto-vectorised loop of cross_entropy.hpp
// spends ~17 vector operations per 16 logits: GCC keeps the float max
// reduction scalar unless it is done on integer keys (three operations per
// vector), rounds by adding and subtracting a magic number and builds 2^n
// with integer operations. Here the max is one vmaxps, the rounding one
// vroundps/vrndscaleps and, on AVX-512, 2^n times the polynomial one
// vscalefps (docs/architecture.md, "Kernels and execution-space instances").
//
// The exp is the same 2^(x log2 e) with Cephes' exp2f polynomial as
// host_exp_nonpositive (host_loops.hpp), so the two paths agree to float
// rounding. NaN: the max skips it (vmaxps returns its second operand when
// either is NaN, and the running max is that one), the exp propagates it,
// so a row with a NaN sums to NaN as on the portable path. -inf logits
// clamp to 2^-125 in the sum, as there.
#include <cstdint>

#include "core/types.hpp"
#include "kernels/host_loops.hpp"

#if !defined(__CUDACC__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__AVX512F__)
#define EXA_CE_ROW_SIMD 512
#elif defined(__AVX2__) && defined(__FMA__)
#define EXA_CE_ROW_SIMD 256
#endif
#endif

#ifdef EXA_CE_ROW_SIMD
#include <immintrin.h>
#endif

namespace exa::kernels::detail {

// Logits per float sum before it is flushed into the double (the portable
// path's kCeBlock): at most 64 terms <= 1 per lane.
constexpr index_t kCeSimdBlock = 1024;

#if EXA_CE_ROW_SIMD == 512
inline __m512 ce_exp2_poly(__m512 f) {
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  return _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
}

// exp(x - mx) for x <= mx, as host_exp_nonpositive.
inline __m512 ce_exp_shifted(__m512 x, __m512 mx) {
  const __m512 t =
      _mm512_max_ps(_mm512_set1_ps(-125.0f), _mm512_mul_ps(_mm512_sub_ps(x, mx), _mm512_set1_ps(1.44269504088896341f)));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_scalef_ps(ce_exp2_poly(_mm512_sub_ps(t, n)), n);
}

inline void ce_row_sum_simd(const float* row, index_t V, float& max_out, double& sum_out) {
  __m512 m0 = _mm512_set1_ps(-__builtin_inff()), m1 = m0;
  index_t j = 0;
  for (; j + 32 <= V; j += 32) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(row + j), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(row + j + 16), m1);
  }
  float mx = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  for (; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
  const __m512 mv = _mm512_set1_ps(mx);
  double s = 0;
  for (index_t j0 = 0; j0 < V; j0 += kCeSimdBlock) {
    const index_t n = V - j0 < kCeSimdBlock ? V - j0 : kCeSimdBlock;
    const float* b = row + j0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    index_t k = 0;
    for (; k + 32 <= n; k += 32) {
      a0 = _mm512_add_ps(a0, ce_exp_shifted(_mm512_loadu_ps(b + k), mv));
      a1 = _mm512_add_ps(a1, ce_exp_shifted(_mm512_loadu_ps(b + k + 16), mv));
    }
    for (; k < n; k += 16) {
      const __mmask16 live = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1u);
      a0 = _mm512_add_ps(a0, _mm512_maskz_mov_ps(live, ce_exp_shifted(_mm512_maskz_loadu_ps(live, b + k), mv)));
    }
    s += double(_mm512_reduce_add_ps(_mm512_add_ps(a0, a1)));
  }
  max_out = mx;
  sum_out = s;
}
#elif EXA_CE_ROW_SIMD == 256
inline __m256 ce_exp_shifted(__m256 x, __m256 mx) {
  const __m256 t =
      _mm256_max_ps(_mm256_set1_ps(-125.0f), _mm256_mul_ps(_mm256_sub_ps(x, mx), _mm256_set1_ps(1.44269504088896341f)));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  // n >= -125 (NaN converts to INT_MIN and stays NaN through p), so 2^n is normal.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float ce_hsum(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

inline void ce_row_sum_simd(const float* row, index_t V, float& max_out, double& sum_out) {
  __m256 m0 = _mm256_set1_ps(-__builtin_inff()), m1 = m0;
  index_t j = 0;
  for (; j + 16 <= V; j += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(row + j), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(row + j + 8), m1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float mx = lanes[0];
  for (int l = 1; l < 8; ++l) mx = lanes[l] > mx ? lanes[l] : mx;
  for (; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
  const __m256 mv = _mm256_set1_ps(mx);
  double s = 0;
  for (index_t j0 = 0; j0 < V; j0 += kCeSimdBlock) {
    const index_t n = V - j0 < kCeSimdBlock ? V - j0 : kCeSimdBlock;
    const float* b = row + j0;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    index_t k = 0;
    for (; k + 16 <= n; k += 16) {
      a0 = _mm256_add_ps(a0, ce_exp_shifted(_mm256_loadu_ps(b + k), mv));
      a1 = _mm256_add_ps(a1, ce_exp_shifted(_mm256_loadu_ps(b + k + 8), mv));
    }
    float tail = 0;  // at most 15 logits, scalar
    for (; k < n; ++k) tail += host_exp_nonpositive(b[k] - mx);
    s += double(ce_hsum(_mm256_add_ps(a0, a1)) + tail);
  }
  max_out = mx;
  sum_out = s;
}
#endif

}  // namespace exa::kernels::detail
