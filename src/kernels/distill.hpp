#pragma once
// Knowledge distillation over the LM head's logits (docs/architecture.md,
// "Distillation"). With temperature tau, the teacher's soft targets are
//   q[n, :] = softmax(zt[n, :] / tau)
// and the student's term, per row that has a target (target >= 0),
//   KL(q || p) = sum_j q_j log q_j - sum_j q_j (zs_j / tau) + lse_tau(zs),
// p = softmax(zs / tau). The first sum, the teacher's negative entropy, is
// computed once with q (without a log per element: log q_j = (zt_j - mx) /
// tau - log S), so the student's term is one dot product per row past its
// log-sum-exp. The loss is coef * tau^2 * (the sum over rows) / n_valid;
// its gradient with respect to zs is coef * tau * (p - q) / n_valid (the
// tau^2 of Hinton et al. keeps the gradient's scale independent of tau).
//
// Each function works on one rank's columns [v0, v0 + Vl) of the
// vocabulary. The row max and the sums of exponentials are the reductions
// a vocabulary-parallel caller allreduces between the steps (max over the
// columns' ranks, then sum); per-row partial sums over the columns (the
// negative entropy, the KL) add up over those ranks too. One exponential
// per element on each side in the forward and two in the backward (the
// cross-entropy's and the term's); on the host in contiguous float rows
// they are host_loops.hpp's polynomial exp, which GCC vectorises.
#include <cstdint>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/row_max.hpp"

namespace exa::kernels::distill {

// The row max is kernels::row_max (row_max.hpp).
using kernels::row_max;

// sums[n] = sum over this rank's columns of exp((logits[n, j] - mx[n]) /
// tau); with `out`, out[n, j] = each term (out may not alias logits).
template <class LV, class MV, class SV, class OV>
void exp_sums(const LV& logits, const MV& mx, double tau, const SV& sums, const OV& out) {
  using Exec = exec_of<SV>;
  using T = typename LV::non_const_value_type;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  const bool keep = out.data() != nullptr;
  if (keep)
    EXA_REQUIRE(index_t(out.extent(0)) == n && index_t(out.extent(1)) == vl,
                "exa::distill::exp_sums: out is {}x{}, the logits {}x{}", out.extent(0), out.extent(1), n, vl);
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(logits, out)) {
      const T inv = T(1.0 / tau);
      const T* pl = logits.data();
      T* po = out.data();
      const index_t sl = logits.stride(0), so = keep ? out.stride(0) : 0;
      Kokkos::parallel_for("exa::distill::exp_sums", Kokkos::RangePolicy<Exec>(0, n), [=](const index_t r) {
        const T* z = pl + r * sl;
        const T m = T(mx(r));
        double s = 0;
        for (index_t j0 = 0; j0 < vl; j0 += 1024) {  // float blocks of <= 1024 terms <= 1, summed in double
          const index_t j1 = j0 + 1024 < vl ? j0 + 1024 : vl;
          T b = 0;
          if (keep) {
            T* o = po + r * so;
            for (index_t j = j0; j < j1; ++j) b += (o[j] = detail::host_exp_nonpositive((z[j] - m) * inv));
          } else {
            for (index_t j = j0; j < j1; ++j) b += detail::host_exp_nonpositive((z[j] - m) * inv);
          }
          s += double(b);
        }
        sums(r) = s;
      });
      return;
    }
  }
  const double inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::exp_sums", Kokkos::RangePolicy<Exec>(0, n), KOKKOS_LAMBDA(const index_t r) {
        double s = 0;
        for (index_t j = 0; j < vl; ++j) {
          const double e = kx::exp((double(logits(r, j)) - double(mx(r))) * inv);
          if (keep) out(r, j) = T(e);
          s += e;
        }
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

// The teacher's soft targets from exp_sums' terms (in probs) and the
// reduced sums: probs[n, j] /= sums[n], and neg_entropy[n] = this rank's
// part of sum_j q_j log q_j, with log q_j = (logits[n, j] - mx[n]) / tau -
// log sums[n].
template <class LV, class MV, class SV, class PV, class HV>
void normalise(const LV& logits, const MV& mx, const SV& sums, double tau, const PV& probs, const HV& neg_entropy) {
  using Exec = exec_of<PV>;
  using T = typename PV::non_const_value_type;
  using TH = typename HV::non_const_value_type;
  const index_t n = probs.extent(0), vl = probs.extent(1);
  const double inv = 1.0 / tau;
  Kokkos::parallel_for(
      "exa::distill::normalise", Kokkos::RangePolicy<Exec>(0, n), KOKKOS_LAMBDA(const index_t r) {
        const double k = 1.0 / sums(r), log_s = kx::log(sums(r)), m = double(mx(r));
        double qz = 0, qs = 0;
        for (index_t j = 0; j < vl; ++j) {
          const double q = double(probs(r, j)) * k;
          probs(r, j) = T(q);
          qz += q * (double(logits(r, j)) - m);
          qs += q;
        }
        neg_entropy(r) = TH(qz * inv - log_s * qs);
      });
}

// Sum over the rows with a target of this rank's part of KL(q || p):
// neg_entropy - sum_j q_j logits_j / tau + lse * sum_j q_j.
template <class LV, class TV, class LseV, class PV, class HV>
double kl_sum(const LV& logits, const TV& targets, const LseV& lse, const PV& probs, const HV& neg_entropy,
              double tau) {
  using Exec = exec_of<LV>;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  EXA_REQUIRE(index_t(probs.extent(0)) == n && index_t(probs.extent(1)) == vl && index_t(neg_entropy.extent(0)) == n,
              "exa::distill::kl_sum: the teacher's probabilities are {}x{}, the student's logits {}x{} (the "
              "teacher ran another micro-batch shape)",
              probs.extent(0), probs.extent(1), n, vl);
  const double inv = 1.0 / tau;
  double total = 0;
  Kokkos::parallel_reduce(
      "exa::distill::kl_sum", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(const index_t r, double& acc) {
        if (targets(r) < 0) return;
        double qz = 0, qs = 0;
        for (index_t j = 0; j < vl; ++j) {
          const double q = double(probs(r, j));
          qz += q * double(logits(r, j));
          qs += q;
        }
        acc += double(neg_entropy(r)) - qz * inv + double(lse(r)) * qs;
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
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(logits, probs)) {
      T* pl = logits.data();
      const T* pq = probs.data();
      const index_t sl = logits.stride(0), sq = probs.stride(0);
      const T a = T(scale), b = T(scale * k), ti = T(inv);
      Kokkos::parallel_for("exa::distill::ce_grad", Kokkos::RangePolicy<Exec>(0, n), [=](const index_t r) {
        T* z = pl + r * sl;
        const T* q = pq + r * sq;
        const std::int64_t t = std::int64_t(targets(r)) - v0;
        if (targets(r) < 0) {
          for (index_t j = 0; j < vl; ++j) z[j] = T(0);
          return;
        }
        const T m = T(ce_lse(r)), mt = T(lse(r));
        for (index_t j = 0; j < vl; ++j) {
          const T zj = z[j];
          z[j] = a * detail::host_exp_nonpositive(zj - m) + b * (detail::host_exp_nonpositive(zj * ti - mt) - q[j]);
        }
        if (t >= 0 && t < vl) z[t] -= a;
      });
      return;
    }
  }
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
