#pragma once
// Kernels of the vocabulary-parallel embedding and cross-entropy
// (docs/architecture.md, "Tensor parallelism"). This rank holds vocabulary
// rows [v0, v0 + Vl); ids and targets are global.
#include <cstdint>

#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/row_max.hpp"

namespace exa::parallel::tensor::vocab {

// out[n, :] = table[tok[n] - v0, :] when tok[n] is one of this rank's rows, 0 otherwise.
template <class TableV, class TokV, class OutV>
void lookup(const TableV& table, const TokV& tokens, std::int64_t v0, const OutV& out) {
  using Exec = exec_of<OutV>;
  using T = typename OutV::non_const_value_type;
  const index_t n = out.extent(0), d = out.extent(1), vl = table.extent(0);
  Kokkos::parallel_for(
      "exa::tp::vocab_lookup", Kokkos::RangePolicy<Exec>(0, n * d), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / d, j = i % d;
        const index_t v = index_t(tokens(r)) - v0;
        out(r, j) = (v >= 0 && v < vl) ? table(v, j) : T(0);
      });
}

// dtable[tok[n] - v0, :] += dout[n, :] for this rank's tokens; columns in
// parallel, tokens in order (deterministic, no atomics, as
// kernels/embedding.hpp).
template <class TokV, class DOutV, class DTableV>
void scatter_add(const TokV& tokens, const DOutV& dout, std::int64_t v0, const DTableV& dtable) {
  using Exec = exec_of<DTableV>;
  const index_t n = tokens.extent(0), d = dtable.extent(1), vl = dtable.extent(0);
  Kokkos::parallel_for(
      "exa::tp::vocab_scatter_add", Kokkos::RangePolicy<Exec>(0, d), KOKKOS_LAMBDA(const index_t j) {
        for (index_t r = 0; r < n; ++r) {
          const index_t v = index_t(tokens(r)) - v0;
          if (v >= 0 && v < vl) dtable(v, j) += dout(r, j);
        }
      });
}

// mx[n] = max over this rank's columns of logits[n, :].
using kernels::row_max;

// parts[n] = sum_j exp(logits[n, j] - mx[n]); parts[N + n] = the target's
// logit when this rank holds it, else 0.
template <class LV, class MV, class TV, class PV>
void row_parts(const LV& logits, const MV& mx, const TV& targets, std::int64_t v0, const PV& parts) {
  using Exec = exec_of<PV>;
  using TL = typename LV::non_const_value_type;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  Kokkos::parallel_for(
      "exa::tp::vocab_row_parts", Kokkos::RangePolicy<Exec>(0, n), KOKKOS_LAMBDA(const index_t r) {
        double s = 0;
        for (index_t j = 0; j < vl; ++j) s += double(kx::exp(TL(logits(r, j)) - TL(mx(r))));
        parts(r) = s;
        const index_t t = index_t(targets(r)) - v0;
        parts(n + r) = (targets(r) >= 0 && t >= 0 && t < vl) ? double(logits(r, t)) : 0.0;
      });
}

// From the reduced parts: lse[n] = mx[n] + log(sum exp) and ce[n] = lse[n]
// - target logit (0 for ignored targets); returns the sum of ce.
template <class MV, class TV, class PV, class LseV, class CeV>
double finish(const MV& mx, const TV& targets, const PV& parts, const LseV& lse, const CeV& ce) {
  using Exec = exec_of<LseV>;
  using TO = typename LseV::non_const_value_type;
  using TC = typename CeV::non_const_value_type;
  const index_t n = mx.extent(0);
  const bool rows = ce.extent(0) == std::size_t(n);
  double total = 0;
  Kokkos::parallel_reduce(
      "exa::tp::vocab_finish", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(const index_t r, double& acc) {
        const double l = double(mx(r)) + kx::log(parts(r));
        lse(r) = TO(l);
        const double c = targets(r) >= 0 ? l - parts(n + r) : 0.0;
        if (rows) ce(r) = TC(c);
        acc += c;
      },
      total);
  return total;
}

// logits[n, j] becomes (softmax - onehot(target)) * dloss / n_valid on this
// rank's columns (0 rows where the target is ignored).
template <class LV, class TV, class LseV>
void grad(const LV& logits, const TV& targets, const LseV& lse, std::int64_t v0, double dloss, index_t n_valid) {
  using Exec = exec_of<LV>;
  using T = typename LV::non_const_value_type;
  const index_t n = logits.extent(0), vl = logits.extent(1);
  const T scale = n_valid > 0 ? T(dloss / double(n_valid)) : T(0);
  Kokkos::parallel_for(
      "exa::tp::vocab_grad", Kokkos::RangePolicy<Exec>(0, n * vl), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / vl, c = i % vl;
        const index_t t = index_t(targets(r));
        if (t < 0) {
          logits(r, c) = T(0);
          return;
        }
        const T p = T(kx::exp(logits(r, c) - lse(r)));
        logits(r, c) = (c + v0 == t ? p - T(1) : p) * scale;
      });
}

// out[b, r * Vl + j] = gathered[(r * B + b) * Vl + j]: rank-ordered pieces
// back into whole rows.
template <class GV, class OV>
void interleave(const GV& gathered, std::int64_t ranks, const OV& out) {
  using Exec = exec_of<OV>;
  const index_t b = out.extent(0), v = out.extent(1), vl = v / ranks;
  Kokkos::parallel_for(
      "exa::tp::vocab_interleave", Kokkos::RangePolicy<Exec>(0, b * v), KOKKOS_LAMBDA(const index_t i) {
        const index_t row = i / v, col = i % v, r = col / vl, j = col % vl;
        out(row, col) = gathered((r * b + row) * vl + j);
      });
}

}  // namespace exa::parallel::tensor::vocab
