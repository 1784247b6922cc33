#pragma once
// Fused softmax cross-entropy over the vocabulary, without materialising the
// probabilities:
//   lse[n]  = logsumexp_j logits[n, j]            (saved for the backward)
//   loss[n] = lse[n] - logits[n, target[n]]        (0 where target[n] < 0: ignored)
//   forward = mean of loss over the non-ignored rows, summed in double
// Backward given d(mean loss) = dloss:
//   dlogits[n, :] = (softmax(logits[n, :]) - onehot(target[n])) * dloss / n_valid
// (zero rows where ignored); dlogits may alias logits (in-place backward).
// Pass the global n_valid when the mean runs over several ranks' tokens.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/ce_row_simd.hpp"
#include "kernels/host_loops.hpp"

namespace exa::kernels {

struct CrossEntropySum {
  double loss_sum = 0;  // sum of per-row losses over the non-ignored rows
  index_t n_valid = 0;  // rows with target >= 0
  double mean() const { return n_valid > 0 ? loss_sum / double(n_valid) : 0.0; }
};

namespace detail {

inline void ce_check_shapes(index_t n, index_t v, index_t n_tgt, index_t n_lse, const char* what) {
  EXA_REQUIRE(n_tgt == n && n_lse == n, "{}: logits have {} rows but targets {} and lse {}", what, n, n_tgt, n_lse);
  EXA_REQUIRE(v > 0 || n == 0, "{}: empty vocabulary", what);
}

// logsumexp of row n of logits, computed by the whole team (max, then a
// double sum of exp(l - max)); every thread of the team gets the result.
template <class Member, class LV>
KOKKOS_INLINE_FUNCTION double ce_row_lse(const Member& team, const LV& logits, index_t n) {
  using T = typename LV::non_const_value_type;
  const index_t V = logits.extent(1);
  T mx;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V), [&](const index_t j, T& m) { m = kx::max(m, T(logits(n, j))); },
      Kokkos::Max<T>(mx));
  double s = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V),
      [&](const index_t j, double& acc) { acc += double(kx::exp(T(logits(n, j)) - mx)); }, s);
  return double(mx) + kx::log(s);
}

// The same on the host, from a contiguous row, as max and sum (lse = max +
// log(sum)): the caller takes the logs of several rows at once, as a libm
// call clobbers every vector register and the exp loop's constants would be
// reloaded after each row's log. The max runs over integer keys in 16 lanes:
// GCC does not vectorise a float `a > m ? a : m` reduction without
// -ffinite-math-only and leaves it scalar, an integer max it does. The sum
// of exp(l - max) runs in 16 lanes of T per block of kCeBlock elements,
// each block's lanes added into a double. Summing in float within a block
// (at most 64 terms <= 1 per lane) bounds the sum's error by 4e-6 relative
// (~1e-7 typically) and keeps the loop on full float vectors
// (host_exp_nonpositive, as l - max <= 0): widening every exp to double (the
// portable kernel's sum) costs the conversions and four accumulators per
// vector in a loop already bound by the exp. Float rows on an AVX-512 or
// AVX2 target take ce_row_simd.hpp's explicit vectors instead, the same
// arithmetic in fewer operations (kCeBlock is defined there).

// An integer with the order of T's values (-0 below +0, NaN of either sign
// beyond the infinity of that sign): two's complement read of the bits, with
// the magnitude bits of negative values flipped.
template <class T>
using ce_key_t = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
template <class T>
inline ce_key_t<T> ce_order_key(T x) {
  using K = ce_key_t<T>;
  K b;
  std::memcpy(&b, &x, sizeof b);
  return b < 0 ? K(b ^ std::numeric_limits<K>::max()) : b;
}
template <class T>
inline T ce_from_order_key(ce_key_t<T> k) {
  using K = ce_key_t<T>;
  const K b = k < 0 ? K(k ^ std::numeric_limits<K>::max()) : k;
  T x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

template <class T>
struct CeRowSum {
  T max;
  double sum;  // of exp(l - max)
};

template <class T>
inline CeRowSum<T> ce_row_sum_host(const T* row, index_t V) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "ce_row_sum_host: float or double logits");
#ifdef EXA_CE_ROW_SIMD
  if constexpr (std::is_same_v<T, float>) {
    CeRowSum<T> out;
    ce_row_sum_simd(row, V, out.max, out.sum);
    return out;
  }
#endif
  using K = ce_key_t<T>;
  K m[16];
  for (int l = 0; l < 16; ++l) m[l] = ce_order_key(row[0]);
  index_t j = 0;
  for (; j + 16 <= V; j += 16)
    for (int l = 0; l < 16; ++l) {
      const K k = ce_order_key(row[j + l]);
      m[l] = k > m[l] ? k : m[l];
    }
  for (; j < V; ++j) {
    const K k = ce_order_key(row[j]);
    m[0] = k > m[0] ? k : m[0];
  }
  // Trees of constant-length loops, not 15-deep chains (a loop over the
  // halving length is not unrolled first, and blocks the vectoriser).
  for (int l = 0; l < 8; ++l) m[l] = m[l + 8] > m[l] ? m[l + 8] : m[l];
  for (int l = 0; l < 4; ++l) m[l] = m[l + 4] > m[l] ? m[l + 4] : m[l];
  for (int l = 0; l < 2; ++l) m[l] = m[l + 2] > m[l] ? m[l + 2] : m[l];
  m[0] = m[1] > m[0] ? m[1] : m[0];
  const T mx = ce_from_order_key<T>(m[0]);
  double s = 0;
  for (index_t j0 = 0; j0 < V; j0 += kCeBlock) {
    const index_t n = V - j0 < kCeBlock ? V - j0 : kCeBlock;
    const T* b = row + j0;
    T acc[16] = {};
    index_t k = 0;
    for (; k + 16 <= n; k += 16)
      for (int l = 0; l < 16; ++l) acc[l] += host_exp_nonpositive(T(b[k + l]) - mx);
    for (; k < n; ++k) acc[0] += host_exp_nonpositive(T(b[k]) - mx);
    for (int l = 0; l < 8; ++l) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; ++l) acc[l] += acc[l + 2];
    s += double(acc[0] + acc[1]);
  }
  return {mx, s};
}

// Rows per work item of the host forward: the logs of this many rows run
// together after their sums.
constexpr index_t kCeRows = 16;

// Runs on the caller's instance (of the logits' space, from which targets
// must be accessible anyway).
template <class TV, class Exec>
index_t ce_count_valid(const TV& targets, const Exec& exec) {
  index_t cnt = 0;
  Kokkos::parallel_reduce(
      "exa::cross_entropy::count", Kokkos::RangePolicy<Exec>(exec, 0, targets.extent(0)),
      KOKKOS_LAMBDA(const index_t n, index_t& acc) { acc += targets(n) >= 0 ? 1 : 0; }, cnt);
  return cnt;
}

}  // namespace detail

// Sum of the per-row losses and the count of non-ignored rows; saves lse[N].
template <class LV, class TV, class LseV>
CrossEntropySum cross_entropy_forward_sum(const LV& logits, const TV& targets, const LseV& lse,
                                          const exec_of<LV>& exec = exec_of<LV>{}) {
  static_assert(LV::rank == 2 && TV::rank == 1 && LseV::rank == 1,
                "exa::cross_entropy_forward: logits[N,V], targets[N], lse[N]");
  using Exec = typename LV::execution_space;
  using TL = typename LseV::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Member = typename Policy::member_type;
  const index_t n_rows = logits.extent(0);
  detail::ce_check_shapes(n_rows, logits.extent(1), targets.extent(0), lse.extent(0), "exa::cross_entropy_forward");
  CrossEntropySum out;
  if (n_rows == 0) return out;
  double total = 0;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(logits)) {
      using T = typename LV::non_const_value_type;
      const auto* pl = logits.data();
      const index_t V = logits.extent(1), sl = logits.stride(0);
      const index_t groups = (n_rows + detail::kCeRows - 1) / detail::kCeRows;
      Kokkos::parallel_reduce(
          "exa::cross_entropy::forward", Kokkos::RangePolicy<Exec>(exec, 0, groups),
          [=](const index_t g, double& acc) {
            const index_t n0 = g * detail::kCeRows;
            const index_t n1 = n0 + detail::kCeRows < n_rows ? n0 + detail::kCeRows : n_rows;
            detail::CeRowSum<T> rs[detail::kCeRows];
            for (index_t n = n0; n < n1; ++n) rs[n - n0] = detail::ce_row_sum_host(pl + n * sl, V);
            for (index_t n = n0; n < n1; ++n) {
              const double l = double(rs[n - n0].max) + std::log(rs[n - n0].sum);
              lse(n) = TL(l);
              const std::int64_t t = targets(n);
              if (t >= 0) acc += l - double(pl[n * sl + t]);
            }
          },
          total);
      out.loss_sum = total;
      out.n_valid = detail::ce_count_valid(targets, exec);
      return out;
    }
  }
  Kokkos::parallel_reduce(
      "exa::cross_entropy::forward", Policy(exec, n_rows, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const index_t n = team.league_rank();
        const double l = detail::ce_row_lse(team, logits, n);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          lse(n) = TL(l);
          const std::int64_t t = targets(n);
          if (t >= 0) acc += l - double(logits(n, t));
        });
      },
      total);
  out.loss_sum = total;
  out.n_valid = detail::ce_count_valid(targets, exec);
  return out;
}

// Mean loss over the non-ignored rows (0 when every row is ignored); saves lse[N].
template <class LV, class TV, class LseV>
double cross_entropy_forward(const LV& logits, const TV& targets, const LseV& lse,
                             const exec_of<LV>& exec = exec_of<LV>{}) {
  return cross_entropy_forward_sum(logits, targets, lse, exec).mean();
}

// Per-row losses (evaluation): losses[n] = lse[n] - logits[n, target[n]], 0 where ignored; saves lse[N].
template <class LV, class TV, class LseV, class LossV>
void cross_entropy_rows(const LV& logits, const TV& targets, const LseV& lse, const LossV& losses,
                        const exec_of<LV>& exec = exec_of<LV>{}) {
  static_assert(LV::rank == 2 && TV::rank == 1 && LseV::rank == 1 && LossV::rank == 1,
                "exa::cross_entropy_rows: logits[N,V], targets[N], lse[N], losses[N]");
  using Exec = typename LV::execution_space;
  using TL = typename LseV::non_const_value_type;
  using TO = typename LossV::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Member = typename Policy::member_type;
  const index_t n_rows = logits.extent(0);
  detail::ce_check_shapes(n_rows, logits.extent(1), targets.extent(0), lse.extent(0), "exa::cross_entropy_rows");
  EXA_REQUIRE(index_t(losses.extent(0)) == n_rows, "exa::cross_entropy_rows: losses has {} rows, logits {}",
              losses.extent(0), n_rows);
  if (n_rows == 0) return;
  Kokkos::parallel_for(
      "exa::cross_entropy::rows", Policy(exec, n_rows, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const index_t n = team.league_rank();
        const double l = detail::ce_row_lse(team, logits, n);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          lse(n) = TL(l);
          const std::int64_t t = targets(n);
          losses(n) = t >= 0 ? TO(l - double(logits(n, t))) : TO(0);
        });
      });
}

// dlogits = (softmax(logits) - onehot(target)) * dloss / n_valid, zero rows where
// target < 0. dlogits may be logits itself.
template <class LV, class TV, class LseV, class DLV>
void cross_entropy_backward(const LV& logits, const TV& targets, const LseV& lse, double dloss, index_t n_valid,
                            const DLV& dlogits, const exec_of<DLV>& exec = exec_of<DLV>{}) {
  static_assert(LV::rank == 2 && TV::rank == 1 && LseV::rank == 1 && DLV::rank == 2,
                "exa::cross_entropy_backward: logits[N,V], targets[N], lse[N], dlogits[N,V]");
  using Exec = typename DLV::execution_space;
  using T = typename DLV::non_const_value_type;
  using TI = typename LV::non_const_value_type;
  const index_t n_rows = logits.extent(0), V = logits.extent(1);
  detail::ce_check_shapes(n_rows, V, targets.extent(0), lse.extent(0), "exa::cross_entropy_backward");
  EXA_REQUIRE(index_t(dlogits.extent(0)) == n_rows && index_t(dlogits.extent(1)) == V,
              "exa::cross_entropy_backward: dlogits is {}x{}, logits {}x{}", dlogits.extent(0), dlogits.extent(1),
              n_rows, V);
  const T scale = n_valid > 0 ? T(dloss / double(n_valid)) : T(0);
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(logits, dlogits)) {
      const auto* pl = logits.data();
      T* pd = dlogits.data();
      const index_t sl = logits.stride(0), sd = dlogits.stride(0);
      Kokkos::parallel_for(
          "exa::cross_entropy::backward", Kokkos::RangePolicy<Exec>(exec, 0, n_rows), [=](const index_t r) {
            const std::int64_t t = targets(r);
            T* out = pd + r * sd;
            if (t < 0) {
              for (index_t c = 0; c < V; ++c) out[c] = T(0);
              return;
            }
            const auto* in = pl + r * sl;  // may be out itself: the target's logit is read first
            const TI m = TI(lse(r));
            const T at_target = (T(detail::host_exp(TI(in[t]) - m)) - T(1)) * scale;
            for (index_t c = 0; c < V; ++c) out[c] = T(detail::host_exp(TI(in[c]) - m)) * scale;
            out[t] = at_target;
          });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::cross_entropy::backward", Kokkos::RangePolicy<Exec>(exec, 0, n_rows * V), KOKKOS_LAMBDA(const index_t idx) {
        const index_t r = idx / V, c = idx % V;
        const std::int64_t t = targets(r);
        if (t < 0) {
          dlogits(r, c) = T(0);
          return;
        }
        const T p = T(kx::exp(TI(logits(r, c)) - TI(lse(r))));
        dlogits(r, c) = (c == t ? p - T(1) : p) * scale;
      });
}

}  // namespace exa::kernels
