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
// host_exp_nonpositive (host_loops.hpp), from the same constants, so the
// two paths agree to float rounding. NaN: the max skips it (vmaxps returns its second operand when
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

// Logits per float sum before it is flushed into the double, on both paths
// (cross_entropy.hpp says why): at most 64 terms <= 1 per lane.
constexpr index_t kCeBlock = 1024;

// The few operations the row sum needs, per instruction set; everything
// else (the loops, the exp) is written once below, over these.
#if EXA_CE_ROW_SIMD == 512
struct CeVec {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V round(V t) { return _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V times_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  // The block's total: its last < 2 widths of logits in masked vectors.
  template <class Exp>
  static float block_total(V a0, V a1, const float* b, index_t k, index_t n, const Exp& exp, float) {
    for (; k < n; k += kWidth) {
      const __mmask16 live = n - k >= kWidth ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1u);
      a0 = add(a0, _mm512_maskz_mov_ps(live, exp(_mm512_maskz_loadu_ps(live, b + k))));
    }
    return _mm512_reduce_add_ps(add(a0, a1));
  }
};
#elif EXA_CE_ROW_SIMD == 256
struct CeVec {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V round(V t) { return _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // n >= kExp2Floor (NaN converts to INT_MIN and stays NaN through p), so 2^n is normal.
  static V times_pow2(V p, V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  static float hmax(V v) {
    alignas(32) float lanes[kWidth];
    _mm256_store_ps(lanes, v);
    float m = lanes[0];
    for (int l = 1; l < kWidth; ++l) m = lanes[l] > m ? lanes[l] : m;
    return m;
  }
  // The block's total: its last < 2 widths of logits (at most 15) scalar.
  template <class Exp>
  static float block_total(V a0, V a1, const float* b, index_t k, index_t n, const Exp&, float mx) {
    float tail = 0;
    for (; k < n; ++k) tail += host_exp_nonpositive(b[k] - mx);
    const V v = add(a0, a1);
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q))) + tail;
  }
};
#endif

#ifdef EXA_CE_ROW_SIMD
// exp(x - mx) for x <= mx, as host_exp_nonpositive (host_loops.hpp).
inline CeVec::V ce_exp_shifted(CeVec::V x, CeVec::V mx) {
  using W = CeVec;
  const W::V t = W::max(W::set1(kExp2Floor), W::mul(W::sub(x, mx), W::set1(kLog2e)));
  const W::V n = W::round(t);
  const W::V f = W::sub(t, n);
  W::V p = W::set1(kExp2Poly[0]);
  for (int i = 1; i < 7; ++i) p = W::fma(p, f, W::set1(kExp2Poly[i]));
  return W::times_pow2(p, n);
}

inline void ce_row_sum_simd(const float* row, index_t V, float& max_out, double& sum_out) {
  using W = CeVec;
  constexpr int w = W::kWidth;
  W::V m0 = W::set1(-__builtin_inff()), m1 = m0;
  index_t j = 0;
  for (; j + 2 * w <= V; j += 2 * w) {
    m0 = W::max(W::load(row + j), m0);
    m1 = W::max(W::load(row + j + w), m1);
  }
  float mx = W::hmax(W::max(m0, m1));
  for (; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
  const W::V mv = W::set1(mx);
  const auto exp = [mv](W::V x) { return ce_exp_shifted(x, mv); };
  double s = 0;
  for (index_t j0 = 0; j0 < V; j0 += kCeBlock) {
    const index_t n = V - j0 < kCeBlock ? V - j0 : kCeBlock;
    const float* b = row + j0;
    W::V a0 = W::zero(), a1 = a0;
    index_t k = 0;
    for (; k + 2 * w <= n; k += 2 * w) {
      a0 = W::add(a0, exp(W::load(b + k)));
      a1 = W::add(a1, exp(W::load(b + k + w)));
    }
    s += double(W::block_total(a0, a1, b, k, n, exp, mx));
  }
  max_out = mx;
  sum_out = s;
}
#endif

}  // namespace exa::kernels::detail
