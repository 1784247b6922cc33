#pragma once
// Token permute / unpermute by expert, with an optional per-expert capacity.
//
// Given the router's choices topk [N,k] (expert ids in [0,E)), the rows of
// the permuted buffer are grouped by expert, expert 0 first; within an
// expert, rows follow token order n, then slot j. With a capacity C > 0 an
// expert keeps only its first C assignments in that (n, j) order and the
// rest are dropped (row -1); C = 0 is dropless. The caller computes C from
// the capacity factor (ceil(c * N * k / E)). Alternatively a keep mask
// [N,k] (0: dropped) decided elsewhere replaces the capacity: context
// parallelism's moe.capacity_scope = "sequence" ranks assignments over the
// whole sequences of several ranks (routed then counts the kept ones too).
//
//   PermutePlan
//     counts        [E]    rows kept per expert
//     routed        [E]    assignments per expert before dropping
//     offsets       [E+1]  first row of each expert; offsets[E] = rows
//     offsets_host  [E+1]  host copy (the grouped gemm needs it on the host)
//     row_of        [N,k]  row of assignment (n, j), or -1 if dropped
//     token_of      [rows] source token of each row
//
// The plan is built deterministically without atomics: the N*k assignments
// are cut into chunks, each chunk histograms its experts, a per-expert scan
// over chunks gives every chunk its starting rank, and each chunk then
// ranks its own assignments in order.
//
//   permute_forward     xp[r]  = x[token_of[r]]                       [rows,d]
//   permute_backward    dx[n]  = sum_j dxp[row_of[n,j]]  (gather)     [N,d]
//   unpermute_forward   y[n]   = sum_j gates[n,j] yp[row_of[n,j]]     [N,d]
//   unpermute_backward  dyp[row_of[n,j]] = gates[n,j] dy[n]           [rows,d]
//                       dgates[n,j]      = dy[n] . yp[row_of[n,j]]    [N,k]
// Dropped slots contribute nothing (and get a zero gate gradient). Every
// output element has exactly one writer.
#include <cstdint>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"

namespace exa::kernels {

namespace detail {
// (row, column) grid for the row gathers below, columns innermost, so no
// element pays for a 64-bit divide and each row is walked contiguously.
template <class Exec>
using PermuteRows2 =
    Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                          Kokkos::IndexType<index_t>>;
template <class Exec>
using PermuteRows3 =
    Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                          Kokkos::IndexType<index_t>>;
}  // namespace detail

template <class D = Device>
struct PermutePlan {
  index_t n_tokens = 0;
  int k = 0;
  int n_experts = 0;
  index_t capacity = 0;  // 0 = dropless
  index_t rows = 0;      // M = total kept assignments
  index_t dropped = 0;   // N*k - rows
  Kokkos::View<int*, Layout, D> counts;
  Kokkos::View<int*, Layout, D> routed;
  Kokkos::View<index_t*, Layout, D> offsets;
  Kokkos::View<index_t*, Layout, Kokkos::HostSpace> offsets_host;
  Kokkos::View<int**, Layout, D> row_of;
  Kokkos::View<int*, Layout, D> token_of;  // the first `rows` entries of token_buf
  // Kept between calls so that rebuilding a plan of the same shape
  // allocates nothing (no View initialization in a training step).
  Kokkos::View<int**, Layout, D> chunk_base;
  Kokkos::View<int*, Layout, D> token_buf;  // [N*k]
};

// Builds the permutation for topk [N,k] over n_experts experts with the
// given capacity (0 = dropless) into `plan`, reusing its buffers when their
// shapes fit. Runs in topk's execution space, on `exec`; returns once
// offsets_host is filled (it waits for `exec`), with token_of still being
// written on `exec`.
template <class I>
void permute_plan(PermutePlan<typename I::device_type>& plan, const I& topk, int n_experts, index_t capacity,
                  const exec_of<I>& exec = exec_of<I>{},
                  const Kokkos::View<const int**, Layout, typename I::device_type>& keep = {}) {
  using D = typename I::device_type;
  using Exec = exec_of<I>;
  const index_t N = static_cast<index_t>(topk.extent(0));
  const int K = static_cast<int>(topk.extent(1));
  const int E = n_experts;
  EXA_REQUIRE(E >= 1, "exa::kernels::permute_plan: need at least one expert (got {})", E);
  EXA_REQUIRE(capacity >= 0, "exa::kernels::permute_plan: capacity must be >= 0 (got {})", capacity);
  const index_t NK = N * K;
  EXA_REQUIRE(NK < (index_t(1) << 31), "exa::kernels::permute_plan: {} assignments exceed int32 row ids", NK);

  index_t bad = 0;
  Kokkos::parallel_reduce(
      "exa::permute::check_ids", Kokkos::RangePolicy<Exec>(exec, 0, NK),
      KOKKOS_LAMBDA(const index_t a, index_t& acc) {
        const int e = topk(a / K, static_cast<int>(a % K));
        acc += (e < 0 || e >= E) ? 1 : 0;
      },
      bad);
  EXA_REQUIRE(bad == 0, "exa::kernels::permute_plan: {} expert ids outside [0, {})", bad, E);
  const bool masked = keep.extent(0) > 0;
  EXA_REQUIRE(!masked || (index_t(keep.extent(0)) == N && int(keep.extent(1)) == K && capacity == 0),
              "exa::kernels::permute_plan: a keep mask must be [N, k] and replaces the capacity");

  plan.n_tokens = N;
  plan.k = K;
  plan.n_experts = E;
  plan.capacity = capacity;
  // Chunks of the flattened (n, j) assignment order.
  const index_t chunk = kx::max(index_t(256), (NK + 4095) / 4096);
  const index_t nchunks = (NK + chunk - 1) / chunk;
  // Allocations (and the zero fills) are queued on `exec` too.
  if (index_t(plan.counts.extent(0)) != E) {
    plan.counts = Kokkos::View<int*, Layout, D>(Kokkos::view_alloc(exec, "exa::permute::counts"), E);
    plan.routed = Kokkos::View<int*, Layout, D>(Kokkos::view_alloc(exec, "exa::permute::routed"), E);
    plan.offsets = Kokkos::View<index_t*, Layout, D>(Kokkos::view_alloc(exec, "exa::permute::offsets"), E + 1);
    plan.offsets_host = Kokkos::View<index_t*, Layout, Kokkos::HostSpace>("exa::permute::offsets_host", E + 1);
  }
  if (index_t(plan.row_of.extent(0)) != N || int(plan.row_of.extent(1)) != K) {
    plan.row_of = Kokkos::View<int**, Layout, D>(
        Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::permute::row_of"), N, K);
    plan.token_buf = Kokkos::View<int*, Layout, D>(
        Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::permute::token_of"), NK);
  }
  if (index_t(plan.chunk_base.extent(0)) != nchunks || int(plan.chunk_base.extent(1)) != E)
    plan.chunk_base = Kokkos::View<int**, Layout, D>(
        Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::permute::chunk_base"), nchunks, E);
  Kokkos::deep_copy(exec, plan.chunk_base, 0);
  auto base = plan.chunk_base;

  auto counts = plan.counts;
  auto routed = plan.routed;
  auto offsets = plan.offsets;
  auto row_of = plan.row_of;
  Kokkos::parallel_for(
      "exa::permute::histogram", Kokkos::RangePolicy<Exec>(exec, 0, nchunks), KOKKOS_LAMBDA(const index_t c) {
        const index_t a1 = kx::min(NK, (c + 1) * chunk);
        for (index_t a = c * chunk; a < a1; ++a) {
          const index_t n = a / K;
          const int j = static_cast<int>(a % K);
          if (!masked || keep(n, j) != 0) base(c, topk(n, j)) += 1;
        }
      });
  const index_t cap = capacity;
  Kokkos::parallel_for(
      "exa::permute::expert_scan", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(const int e) {
        int run = 0;
        for (index_t c = 0; c < nchunks; ++c) {
          const int t = base(c, e);
          base(c, e) = run;
          run += t;
        }
        routed(e) = run;
        counts(e) = (cap > 0 && run > cap) ? static_cast<int>(cap) : run;
      });
  Kokkos::parallel_scan(
      "exa::permute::offsets", Kokkos::RangePolicy<Exec>(exec, 0, E + 1),
      KOKKOS_LAMBDA(const int e, index_t& upd, const bool final) {
        if (final) offsets(e) = upd;
        if (e < E) upd += counts(e);
      });
  Kokkos::parallel_for(
      "exa::permute::rows", Kokkos::RangePolicy<Exec>(exec, 0, nchunks), KOKKOS_LAMBDA(const index_t c) {
        const index_t a1 = kx::min(NK, (c + 1) * chunk);
        for (index_t a = c * chunk; a < a1; ++a) {
          const index_t n = a / K;
          const int j = static_cast<int>(a % K);
          const int e = topk(n, j);
          if (masked && keep(n, j) == 0) {
            row_of(n, j) = -1;
            continue;
          }
          const int rank = base(c, e)++;
          row_of(n, j) = (cap == 0 || rank < cap) ? static_cast<int>(offsets(e) + rank) : -1;
        }
      });

  // Ordered after the scan on `exec`; the host reads the copy right away.
  Kokkos::deep_copy(exec, plan.offsets_host, plan.offsets);
  exec.fence();
  plan.rows = plan.offsets_host(E);
  plan.dropped = NK - plan.rows;

  plan.token_of = Kokkos::subview(plan.token_buf, Kokkos::make_pair(index_t(0), plan.rows));
  auto token_of = plan.token_of;
  Kokkos::parallel_for(
      "exa::permute::token_of", Kokkos::RangePolicy<Exec>(exec, 0, NK), KOKKOS_LAMBDA(const index_t a) {
        const index_t n = a / K;
        const int r = row_of(n, static_cast<int>(a % K));
        if (r >= 0) token_of(r) = static_cast<int>(n);
      });
}

// The same into a new plan.
template <class I>
PermutePlan<typename I::device_type> permute_plan(const I& topk, int n_experts, index_t capacity,
                                                  const exec_of<I>& exec = exec_of<I>{}) {
  PermutePlan<typename I::device_type> plan;
  permute_plan(plan, topk, n_experts, capacity, exec);
  return plan;
}

// xp [rows,d] = x [N,d] gathered by token_of [rows].
template <class X, class R, class XP>
void permute_forward(const X& x, const R& token_of, const XP& xp, const exec_of<XP>& exec = exec_of<XP>{}) {
  using Exec = exec_of<XP>;
  using T = scalar_of<XP>;
  const index_t M = static_cast<index_t>(xp.extent(0));
  const index_t d = static_cast<index_t>(xp.extent(1));
  EXA_REQUIRE(x.extent(1) == xp.extent(1) && token_of.extent(0) == xp.extent(0),
              "exa::kernels::permute_forward: shapes disagree");
  if (M == 0 || d == 0) return;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(x, xp)) {
      const auto* px = x.data();
      T* pxp = xp.data();
      const index_t sx = x.stride(0), sxp = xp.stride(0);
      Kokkos::parallel_for("exa::permute::forward", Kokkos::RangePolicy<Exec>(exec, 0, M), [=](const index_t r) {
        const auto* src = px + index_t(token_of(r)) * sx;
        T* dst = pxp + r * sxp;
        for (index_t c = 0; c < d; ++c) dst[c] = T(src[c]);
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::permute::forward", detail::PermuteRows2<Exec>(exec, {0, 0}, {M, d}),
      KOKKOS_LAMBDA(const index_t r, const index_t c) {
        xp(r, c) = T(x(token_of(r), c));
      });
}

// dx [N,d] = sum over kept slots j of dxp [row_of[n,j], :] (overwritten).
template <class DXP, class R2, class DX>
void permute_backward(const DXP& dxp, const R2& row_of, const DX& dx, const exec_of<DX>& exec = exec_of<DX>{}) {
  using Exec = exec_of<DX>;
  using T = scalar_of<DX>;
  const index_t N = static_cast<index_t>(dx.extent(0));
  const index_t d = static_cast<index_t>(dx.extent(1));
  const int K = static_cast<int>(row_of.extent(1));
  EXA_REQUIRE(dxp.extent(1) == dx.extent(1) && row_of.extent(0) == dx.extent(0),
              "exa::kernels::permute_backward: shapes disagree");
  if (N == 0 || d == 0) return;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(dxp, dx)) {
      const auto* pdxp = dxp.data();
      T* pdx = dx.data();
      const index_t sp = dxp.stride(0), sd = dx.stride(0);
      Kokkos::parallel_for("exa::permute::backward", Kokkos::RangePolicy<Exec>(exec, 0, N), [=](const index_t n) {
        T* dst = pdx + n * sd;
        for (index_t c = 0; c < d; ++c) dst[c] = T(0);
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          if (r < 0) continue;
          const auto* src = pdxp + index_t(r) * sp;
          for (index_t c = 0; c < d; ++c) dst[c] += T(src[c]);
        }
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::permute::backward", detail::PermuteRows2<Exec>(exec, {0, 0}, {N, d}),
      KOKKOS_LAMBDA(const index_t n, const index_t c) {
        T s = 0;
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          if (r >= 0) s += T(dxp(r, c));
        }
        dx(n, c) = s;
      });
}

// y [N,d] = sum over kept slots j of gates[n,j] * yp [row_of[n,j], :].
template <class YP, class G, class R2, class Y>
void unpermute_forward(const YP& yp, const G& gates, const R2& row_of, const Y& y,
                       const exec_of<Y>& exec = exec_of<Y>{}) {
  using Exec = exec_of<Y>;
  using T = scalar_of<Y>;
  const index_t N = static_cast<index_t>(y.extent(0));
  const index_t d = static_cast<index_t>(y.extent(1));
  const int K = static_cast<int>(row_of.extent(1));
  EXA_REQUIRE(yp.extent(1) == y.extent(1) && row_of.extent(0) == y.extent(0) && gates.extent(0) == y.extent(0) &&
                  gates.extent(1) == row_of.extent(1),
              "exa::kernels::unpermute_forward: shapes disagree");
  if (N == 0 || d == 0) return;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(yp, y)) {
      const auto* pyp = yp.data();
      T* py = y.data();
      const index_t sp = yp.stride(0), sy = y.stride(0);
      Kokkos::parallel_for("exa::unpermute::forward", Kokkos::RangePolicy<Exec>(exec, 0, N), [=](const index_t n) {
        T* dst = py + n * sy;
        for (index_t c = 0; c < d; ++c) dst[c] = T(0);
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          if (r < 0) continue;
          const T g = T(gates(n, j));
          const auto* src = pyp + index_t(r) * sp;
          for (index_t c = 0; c < d; ++c) dst[c] += g * T(src[c]);
        }
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::unpermute::forward", detail::PermuteRows2<Exec>(exec, {0, 0}, {N, d}),
      KOKKOS_LAMBDA(const index_t n, const index_t c) {
        T s = 0;
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          if (r >= 0) s += T(gates(n, j)) * T(yp(r, c));
        }
        y(n, c) = s;
      });
}

// Gradients of sum(y * dy) for y = unpermute_forward(yp, gates, row_of):
// dyp [rows,d] and dgates [N,k] (both overwritten; dropped slots get 0).
template <class DY, class YP, class G, class R2, class DYP, class DG>
void unpermute_backward(const DY& dy, const YP& yp, const G& gates, const R2& row_of, const DYP& dyp,
                        const DG& dgates, const exec_of<DYP>& exec = exec_of<DYP>{}) {
  using Exec = exec_of<DYP>;
  using T = scalar_of<DYP>;
  using TG = scalar_of<DG>;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  const index_t N = static_cast<index_t>(dy.extent(0));
  const index_t d = static_cast<index_t>(dy.extent(1));
  const int K = static_cast<int>(row_of.extent(1));
  EXA_REQUIRE(yp.extent(1) == dy.extent(1) && dyp.extent(0) == yp.extent(0) && dyp.extent(1) == yp.extent(1) &&
                  row_of.extent(0) == dy.extent(0) && gates.extent(0) == dy.extent(0) &&
                  gates.extent(1) == row_of.extent(1) && dgates.extent(0) == gates.extent(0) &&
                  dgates.extent(1) == gates.extent(1),
              "exa::kernels::unpermute_backward: shapes disagree");
  EXA_REQUIRE(N * K < (index_t(1) << 31), "exa::kernels::unpermute_backward: too many assignments");
  // Each row of the permuted buffer comes from exactly one kept (n, j).
  bool rows_done = false;
  if constexpr (detail::host_exec<Exec>) {
    if (N > 0 && K > 0 && d > 0 && detail::rows_contiguous(dy, dyp)) {
      const auto* pdy = dy.data();
      T* pdyp = dyp.data();
      const index_t sy = dy.stride(0), sp = dyp.stride(0);
      Kokkos::parallel_for("exa::unpermute::backward_rows", Kokkos::RangePolicy<Exec>(exec, 0, N), [=](const index_t n) {
        const auto* src = pdy + n * sy;
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          if (r < 0) continue;
          const T g = T(gates(n, j));
          T* dst = pdyp + index_t(r) * sp;
          for (index_t c = 0; c < d; ++c) dst[c] = g * T(src[c]);
        }
      });
      rows_done = true;
    }
  }
  if (!rows_done && N > 0 && K > 0 && d > 0)
    Kokkos::parallel_for(
        "exa::unpermute::backward_rows", detail::PermuteRows3<Exec>(exec, {0, 0, 0}, {N, index_t(K), d}),
        KOKKOS_LAMBDA(const index_t n, const index_t jj, const index_t c) {
          const int j = static_cast<int>(jj);
          const int r = row_of(n, j);
          if (r >= 0) dyp(r, c) = T(gates(n, j)) * T(dy(n, c));
        });
  if constexpr (detail::host_exec<Exec>) {
    // A team per (n, j) costs a team launch and a scalar reduction per
    // 512-element dot product on the host: 40% of the copy rate.
    if (N > 0 && K > 0 && detail::rows_contiguous(dy, yp)) {
      const auto* pdy = dy.data();
      const auto* pyp = yp.data();
      const index_t sy = dy.stride(0), sp = yp.stride(0);
      Kokkos::parallel_for("exa::unpermute::backward_gates", Kokkos::RangePolicy<Exec>(exec, 0, N), [=](const index_t n) {
        for (int j = 0; j < K; ++j) {
          const int r = row_of(n, j);
          dgates(n, j) = r < 0 ? TG(0) : detail::dot16<TG>(pdy + n * sy, pyp + index_t(r) * sp, d);
        }
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::unpermute::backward_gates", Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(N * K), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t a = team.league_rank();
        const index_t n = a / K;
        const int j = static_cast<int>(a % K);
        const int r = row_of(n, j);
        TG s = 0;
        if (r >= 0)
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d), [&](const index_t c, TG& acc) { acc += TG(dy(n, c)) * TG(yp(r, c)); },
              s);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dgates(n, j) = s; });
      });
}

}  // namespace exa::kernels
