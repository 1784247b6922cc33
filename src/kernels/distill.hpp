#pragma once
// Knowledge distillation over the LM head's logits (docs/architecture.md,
// "Distillation"). With temperature tau, the teacher's soft targets are
//   q[n, :] = softmax(zt[n, :] / tau)
// and the student's term, per row that has a target (target >= 0),
//   KL(q || p),  p = softmax(zs[n, :] / tau),
// summed here; the loss is coef * tau^2 * (that sum) / n_valid, so its
// gradient with respect to zs is coef * tau * (p - q) / n_valid (the tau^2
// of Hinton et al. keeps the gradient's scale independent of tau).
//
// Each function works on one rank's columns [v0, v0 + Vl) of the
// vocabulary. The row max and the sum of exponentials are the two
// reductions a vocabulary-parallel caller allreduces between the steps
// (max over the columns' ranks, then sum); a caller with the whole
// vocabulary calls them back to back.
#include <cstdint>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels::distill {

// mx[n] = max over this rank's columns of logits[n, :].
template <class LV, class MV>
void row_max(const LV& logits, const MV& mx) {
  using Exec = exec_of<MV>;
  using T = typename MV::non_const_value_type;
  const index_t vl = logits.extent(1);
  Kokkos::parallel_for(
      "exa::distill::row_max", Kokkos::RangePolicy<Exec>(0, logits.extent(0)), KOKKOS_LAMBDA(const index_t r) {
        T m = T(logits(r, 0));
        for (index_t j = 1; j < vl; ++j) m = kx::max(m, T(logits(r, j)));
        mx(r) = m;
      });
}

// sums[n] = sum over this rank's columns of exp((logits[n, j] - mx[n]) / tau).
template <class LV, class MV, class SV>
void sum_exp(const LV& logits, const MV& mx, double tau, const SV& sums) {
  using Exec = exec_of<SV>;
  const index_t vl = logits.extent(1);
  const double inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::sum_exp", Kokkos::RangePolicy<Exec>(0, logits.extent(0)), KOKKOS_LAMBDA(const index_t r) {
        double s = 0;
        for (index_t j = 0; j < vl; ++j) s += kx::exp((double(logits(r, j)) - double(mx(r))) * inv);
        sums(r) = s;
      });
}

// lse[n] = log sum_j exp(logits[n, j] / tau) over the whole vocabulary,
// from the reduced max and sums.
template <class MV, class SV, class LseV>
void finish_lse(const MV& mx, const SV& sums, double tau, const LseV& lse) {
  using Exec = exec_of<LseV>;
  using T = typename LseV::non_const_value_type;
  const double inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::finish_lse", Kokkos::RangePolicy<Exec>(0, lse.extent(0)),
      KOKKOS_LAMBDA(const index_t r) { lse(r) = T(double(mx(r)) * inv + kx::log(sums(r))); });
}

// The teacher's soft targets: probs[n, j] = exp(logits[n, j] / tau - lse[n]).
template <class LV, class LseV, class PV>
void soft_targets(const LV& logits, const LseV& lse, double tau, const PV& probs) {
  using Exec = exec_of<PV>;
  using T = typename PV::non_const_value_type;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  EXA_REQUIRE(index_t(probs.extent(0)) == n && index_t(probs.extent(1)) == vl,
              "exa::distill::soft_targets: probs are {}x{}, the logits {}x{}", probs.extent(0), probs.extent(1), n, vl);
  const double inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::soft_targets", Kokkos::RangePolicy<Exec>(0, n * vl), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / vl, c = i % vl;
        probs(r, c) = T(kx::exp(double(logits(r, c)) * inv - double(lse(r))));
      });
}

// Sum over the rows with a target of sum_j q (log q - log p) on this rank's
// columns, p from the student's logits and tempered lse (q = 0 adds 0).
template <class LV, class TV, class LseV, class PV>
double kl_sum(const LV& logits, const TV& targets, const LseV& lse, const PV& probs, double tau) {
  using Exec = exec_of<LV>;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  EXA_REQUIRE(index_t(probs.extent(0)) == n && index_t(probs.extent(1)) == vl,
              "exa::distill::kl_sum: the teacher's probabilities are {}x{}, the student's logits {}x{} (the "
              "teacher ran another micro-batch shape)",
              probs.extent(0), probs.extent(1), n, vl);
  const double inv = 1.0 / tau;
  double total = 0;
  Kokkos::parallel_reduce(
      "exa::distill::kl_sum", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(const index_t r, double& acc) {
        if (targets(r) < 0) return;
        double s = 0;
        for (index_t j = 0; j < vl; ++j) {
          const double q = double(probs(r, j));
          if (q > 0) s += q * (kx::log(q) - (double(logits(r, j)) * inv - double(lse(r))));
        }
        acc += s;
      },
      total);
  return total;
}

// In place, logits[n, j] becomes the gradient of
//   dloss * (ce_sum + coef * tau^2 * kl_sum) / n_valid
// on this rank's columns: dloss / n_valid * ((softmax - onehot(target)) +
// coef * tau * (p - q)); rows without a target become 0. `ce_lse` is the
// untempered lse of the cross-entropy, `lse` the tempered one.
template <class LV, class TV, class CeLseV, class LseV, class PV>
void ce_grad(const LV& logits, const TV& targets, const CeLseV& ce_lse, const LseV& lse, const PV& probs, double tau,
             double coef, std::int64_t v0, double dloss, index_t n_valid) {
  using Exec = exec_of<LV>;
  using T = typename LV::non_const_value_type;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  const double scale = n_valid > 0 ? dloss / double(n_valid) : 0.0, k = coef * tau, inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::ce_grad", Kokkos::RangePolicy<Exec>(0, n * vl), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / vl, c = i % vl;
        const index_t t = index_t(targets(r));
        if (t < 0) {
          logits(r, c) = T(0);
          return;
        }
        const double z = double(logits(r, c));
        const double p = kx::exp(z - double(ce_lse(r)));
        const double pt = kx::exp(z * inv - double(lse(r)));
        const double g = (c + v0 == t ? p - 1.0 : p) + k * (pt - double(probs(r, c)));
        logits(r, c) = T(g * scale);
      });
}

}  // namespace exa::kernels::distill
