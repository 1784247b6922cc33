#pragma once
// MoE router: fp32 softmax over the experts, top-k, (renormalised) gates,
// per-expert assignment counts, and the two auxiliary losses of docs/architecture.md ("The model"):
//
//   aux = aux_coef * E * sum_e f_e P_e,  f_e = count_e / (N k),  P_e = mean_n probs[n,e]
//   z   = z_coef * mean_n lse_n^2,       lse_n = logsumexp_e logits[n,e]
//
// f_e is a constant for the gradient (Switch / Megatron convention): the
// aux loss reaches the logits only through P_e.
//
//   logits [N,E] (from a gemm elsewhere)
//   probs  [N,E]  softmax, saved for backward (fp32 or wider)
//   lse    [N]
//   topk   [N,k]  int32 expert ids, largest probability first; ties go to the
//                 lower expert id
//   bias   [E]    optional (an empty View: none): added to every token's
//                 probabilities for the top-k SELECTION only (aux-loss-free
//                 balancing, DeepSeek-V3; docs/architecture.md "The model").
//                 topk is then ordered by probs + bias; the gates, counts and
//                 losses are those of the unbiased probabilities at the chosen
//                 experts, and router_backward needs no change (the selection
//                 is a constant for the gradient, the bias has none)
//   ring   [E]    optional (an empty View: none): clone families after
//                 expert growth (docs/architecture.md "Expert growth"):
//                 ring(e) is the next expert of e's family, e itself when
//                 it has none
//   canon  [E]    with `ring`: the lowest member of e's family whose router
//                 row equals e's bit for bit (e itself when none does).
//                 Such clones compute the same logit, but a gemm may round
//                 two equal columns differently: each expert reads its
//                 canon's logit, so they tie exactly. Of tied members with
//                 equal scores a token can take one only, chosen by a hash
//                 of the token, so that the members split the family's
//                 tokens and none takes two of its k slots. With a bias the
//                 selection scores count each set of identical clones once.
//                 With norm_topk the chosen set, hence the gates, are then
//                 those of the model before growth (to round-off)
//   gates  [N,k]  probs of the chosen experts, divided by their sum when
//                 norm_topk
//   counts [E]    assignments per expert (before any capacity dropping)
//
// Everything is deterministic: one thread per token for the row work, one
// team per expert for the column statistics, fixed-order reductions, no
// atomics.
#include <cstdint>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels {

struct RouterOptions {
  bool norm_topk = true;  // renormalise the chosen probabilities to sum to 1
  double aux_coef = 0.0;  // load-balancing loss coefficient
  double z_coef = 0.0;    // router z-loss coefficient
};

// Loss values, coefficients included (what gets added to the model loss).
struct RouterLosses {
  double aux = 0.0;
  double z = 0.0;
};

// The hash that picks one of a token's tied clones: a mix of the ids of
// its largest and smallest logits (the first of equals). Layouts compute
// the logits in other orders and differ in their last bits, which a hash of
// the values would see; the ranking changes only where two logits nearly
// tie, as rarely as the top-k selection itself.
KOKKOS_INLINE_FUNCTION std::uint32_t router_tie_hash(std::uint32_t a, std::uint32_t b) {
  std::uint64_t z = (std::uint64_t(a) << 32) ^ b;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return std::uint32_t((z ^ (z >> 31)) >> 16);
}

template <class Lg, class B, class R, class P, class S, class I, class G, class C>
RouterLosses router_forward(const Lg& logits, const B& bias, const R& ring, const R& canon, const RouterOptions& opt,
                            const P& probs, const S& lse, const I& topk, const G& gates, const C& counts,
                            const exec_of<P>& exec = exec_of<P>{}) {
  using Exec = exec_of<P>;
  using T = scalar_of<P>;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  const index_t N = static_cast<index_t>(logits.extent(0));
  const int E = static_cast<int>(logits.extent(1));
  const int K = static_cast<int>(topk.extent(1));
  EXA_REQUIRE(K >= 1 && K <= E, "exa::kernels::router: top-k must be in [1, n_experts] (k = {}, E = {})", K, E);
  EXA_REQUIRE(probs.extent(0) == logits.extent(0) && probs.extent(1) == logits.extent(1) &&
                  lse.extent(0) == logits.extent(0) && topk.extent(0) == logits.extent(0) &&
                  gates.extent(0) == logits.extent(0) && gates.extent(1) == topk.extent(1) &&
                  counts.extent(0) == logits.extent(1),
              "exa::kernels::router_forward: tensor shapes disagree");
  EXA_REQUIRE(bias.extent(0) == 0 || bias.extent(0) == logits.extent(1),
              "exa::kernels::router_forward: the routing bias has {} entries for {} experts", bias.extent(0), E);
  EXA_REQUIRE(ring.extent(0) == 0 || ring.extent(0) == logits.extent(1),
              "exa::kernels::router_forward: the clone ring has {} entries for {} experts", ring.extent(0), E);
  EXA_REQUIRE(canon.extent(0) == ring.extent(0), "exa::kernels::router_forward: {} canon entries for a ring of {}",
              canon.extent(0), ring.extent(0));
  const bool norm = opt.norm_topk;
  const bool biased = bias.extent(0) > 0;
  const bool clones = ring.extent(0) > 0;

  Kokkos::parallel_for(
      "exa::router::softmax_topk", Kokkos::RangePolicy<Exec>(exec, 0, N), KOKKOS_LAMBDA(const index_t n) {
        auto logit = [&](int e) { return T(logits(n, clones ? canon(e) : e)); };
        T m = logit(0), lo = m;
        int arg_hi = 0, arg_lo = 0;
        for (int e = 1; e < E; ++e) {
          const T x = logit(e);
          if (x > m) {
            m = x;
            arg_hi = e;
          }
          if (x < lo) {
            lo = x;
            arg_lo = e;
          }
        }
        T s = 0;
        for (int e = 0; e < E; ++e) {
          const T x = kx::exp(logit(e) - m);
          probs(n, e) = x;
          s += x;
        }
        const T inv = T(1) / s;
        for (int e = 0; e < E; ++e) probs(n, e) *= inv;
        lse(n) = m + kx::log(s);
        // The j-th pick is the best expert strictly after pick j-1 in the
        // order (score descending, id ascending; score = prob [+ bias]):
        // k passes, no extra memory.
        T prev_s = 0;
        int prev_e = -1;
        T gsum = 0;
        const std::uint32_t h = clones ? router_tie_hash(std::uint32_t(arg_hi), std::uint32_t(arg_lo)) : 0u;
        // With a bias the ranking is not scale-free, and clones' softmax
        // terms shrink every other probability: the selection scores count
        // each set of identical clones once (dup: the probability of all
        // members but the lowest), as the model before growth did.
        T scale = 1;
        if (clones && biased) {
          T dup = 0;
          for (int e = 0; e < E; ++e) dup += canon(e) != e ? T(probs(n, e)) : T(0);
          scale = T(1) / (T(1) - dup);
        }
        auto score = [&](int e) { return biased ? T(probs(n, e)) * scale + T(bias(e)) : T(probs(n, e)); };
        // Of the members of e's family that tie with it exactly, only the
        // (h mod ties)-th by id may be chosen.
        auto eligible = [&](int e, T sc) {
          if (!clones || ring(e) == e) return true;
          int ties = 1, below = 0;
          for (int f = ring(e); f != e; f = ring(f))
            if (canon(f) == canon(e) && score(f) == sc) {
              ++ties;
              below += f < e ? 1 : 0;
            }
          return ties == 1 || std::uint32_t(below) == h % std::uint32_t(ties);
        };
        for (int j = 0; j < K; ++j) {
          int best = -1;
          T best_s = 0;
          for (int e = 0; e < E; ++e) {
            const T sc = score(e);
            const bool after = prev_e < 0 || sc < prev_s || (sc == prev_s && e > prev_e);
            if (after && (best < 0 || sc > best_s) && eligible(e, sc)) {
              best = e;
              best_s = sc;
            }
          }
          if (best < 0) {  // only with NaN probabilities, or clones leaving too few: keep ids in range
            best = j % E;
            best_s = score(best);
          }
          const T p = probs(n, best);
          topk(n, j) = best;
          gates(n, j) = p;
          gsum += p;
          prev_e = best;
          prev_s = best_s;
        }
        if (norm) {
          const T ginv = T(1) / gsum;
          for (int j = 0; j < K; ++j) gates(n, j) *= ginv;
        }
      });

  // Per-expert assignment count and probability sum: one team per expert.
  Kokkos::View<double*, Kokkos::LayoutRight, typename P::device_type> psum(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::router::psum"), E);
  const index_t NK = N * K;
  Kokkos::parallel_for(
      "exa::router::expert_stats", Kokkos::TeamPolicy<Exec>(exec, E, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int e = team.league_rank();
        double ps = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, N), [&](const index_t n, double& acc) { acc += double(probs(n, e)); },
            ps);
        index_t cnt = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, NK),
            [&](const index_t a, index_t& acc) { acc += (topk(a / K, static_cast<int>(a % K)) == e) ? 1 : 0; },
            cnt);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          psum(e) = ps;
          counts(e) = static_cast<scalar_of<C>>(cnt);
        });
      });

  RouterLosses out;
  if (N == 0) return out;
  double fp = 0;  // sum_e count_e * psum_e
  Kokkos::parallel_reduce(
      "exa::router::aux_loss", Kokkos::RangePolicy<Exec>(exec, 0, E),
      KOKKOS_LAMBDA(const int e, double& acc) { acc += double(counts(e)) * psum(e); }, fp);
  double z2 = 0;
  Kokkos::parallel_reduce(
      "exa::router::z_loss", Kokkos::RangePolicy<Exec>(exec, 0, N),
      KOKKOS_LAMBDA(const index_t n, double& acc) {
        const double l = double(lse(n));
        acc += l * l;
      },
      z2);
  const double dn = static_cast<double>(N);
  out.aux = opt.aux_coef * E * fp / (dn * K * dn);
  out.z = opt.z_coef * z2 / dn;
  return out;
}

// Without clone families.
template <class Lg, class B, class P, class S, class I, class G, class C>
RouterLosses router_forward(const Lg& logits, const B& bias, const RouterOptions& opt, const P& probs, const S& lse,
                            const I& topk, const G& gates, const C& counts, const exec_of<P>& exec = exec_of<P>{}) {
  const Kokkos::View<const int*, typename P::device_type> none;
  return router_forward(logits, bias, none, none, opt, probs, lse, topk, gates, counts, exec);
}

// Without a routing bias.
template <class Lg, class P, class S, class I, class G, class C>
RouterLosses router_forward(const Lg& logits, const RouterOptions& opt, const P& probs, const S& lse,
                            const I& topk, const G& gates, const C& counts, const exec_of<P>& exec = exec_of<P>{}) {
  return router_forward(logits, Kokkos::View<const scalar_of<P>*, typename P::device_type>(), opt, probs, lse, topk,
                        gates, counts, exec);
}

// dlogits (overwritten) from the gradient of the gates and the upstream
// gradients d_aux = dLoss/d(aux) and d_z = dLoss/d(z) of the two loss values
// router_forward returned (1 for a plain sum, or a loss scale / accumulation
// factor). `gates`, `probs`, `lse`, `topk`, `counts` are forward outputs.
template <class DG, class P, class S, class I, class G, class C, class DL>
void router_backward(const DG& dgates, const P& probs, const S& lse, const I& topk, const G& gates,
                     const C& counts, const RouterOptions& opt, double d_aux, double d_z, const DL& dlogits,
                     const exec_of<DL>& exec = exec_of<DL>{}) {
  using Exec = exec_of<DL>;
  using T = scalar_of<DL>;
  const index_t N = static_cast<index_t>(probs.extent(0));
  const int E = static_cast<int>(probs.extent(1));
  const int K = static_cast<int>(topk.extent(1));
  EXA_REQUIRE(dgates.extent(0) == topk.extent(0) && dgates.extent(1) == topk.extent(1) &&
                  gates.extent(0) == topk.extent(0) && gates.extent(1) == topk.extent(1) &&
                  topk.extent(0) == probs.extent(0) && lse.extent(0) == probs.extent(0) &&
                  counts.extent(0) == probs.extent(1) && dlogits.extent(0) == probs.extent(0) &&
                  dlogits.extent(1) == probs.extent(1),
              "exa::kernels::router_backward: tensor shapes disagree");
  if (N == 0) return;
  const double dn = static_cast<double>(N);
  // d aux / d probs[n,e] = aux_coef * E * f_e / N = c_aux * count_e
  const T c_aux = static_cast<T>(d_aux * opt.aux_coef * E / (dn * K * dn));
  // d z / d lse_n = 2 z_coef lse_n / N
  const T c_z = static_cast<T>(d_z * opt.z_coef * 2.0 / dn);
  const bool norm = opt.norm_topk;
  Kokkos::parallel_for(
      "exa::router::backward", Kokkos::RangePolicy<Exec>(exec, 0, N), KOKKOS_LAMBDA(const index_t n) {
        T ssum = 0, gdot = 0;
        for (int j = 0; j < K; ++j) {
          ssum += T(probs(n, topk(n, j)));
          gdot += T(dgates(n, j)) * T(gates(n, j));
        }
        const T sinv = norm ? T(1) / ssum : T(1);
        // dprobs[e] = c_aux count_e + sum_{j: topk_j = e} gterm_j
        T sdot = 0;  // sum_e probs[e] dprobs[e]
        for (int e = 0; e < E; ++e) sdot += T(probs(n, e)) * (c_aux * T(counts(e)));
        for (int j = 0; j < K; ++j) {
          const T gterm = norm ? (T(dgates(n, j)) - gdot) * sinv : T(dgates(n, j));
          sdot += T(probs(n, topk(n, j))) * gterm;
        }
        const T zt = c_z * T(lse(n));
        for (int e = 0; e < E; ++e) dlogits(n, e) = T(probs(n, e)) * (c_aux * T(counts(e)) - sdot + zt);
        for (int j = 0; j < K; ++j) {
          const int e = topk(n, j);
          const T gterm = norm ? (T(dgates(n, j)) - gdot) * sinv : T(dgates(n, j));
          dlogits(n, e) += T(probs(n, e)) * gterm;
        }
      });
}

}  // namespace exa::kernels
