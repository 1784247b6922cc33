#pragma once
// RMSNorm over the rows of x[N,d] (docs/architecture.md, "The model"):
//   y = x * rsqrt(mean(x^2) + eps) * w
// The forward saves rstd[N] = rsqrt(mean(x^2) + eps) for the backward.
//
// Backward, with xhat = x * rstd and g = dy * w:
//   dx = rstd * (g - xhat * mean(g * xhat))          (row by row)
//   dw = sum over rows of dy * xhat                   (column-parallel, rows
//        summed in order in double: deterministic, no atomics)
#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"

namespace exa::kernels {

namespace detail {
// Columns per work item of the column-parallel weight-gradient sum.
template <class Exec>
struct RmsnormColumnBlock {
  static constexpr index_t value =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible ? 32 : 1;
};
}  // namespace detail

// y[N,d] = x * rstd * w, rstd[N] saved. y may alias x.
template <class XV, class WV, class YV, class RV>
void rmsnorm_forward(const XV& x, const WV& w, const YV& y, const RV& rstd, double eps = 1e-5,
                     const exec_of<YV>& exec = exec_of<YV>{}) {
  static_assert(XV::rank == 2 && WV::rank == 1 && YV::rank == 2 && RV::rank == 1,
                "exa::rmsnorm_forward: x[N,d], w[d], y[N,d], rstd[N]");
  using Exec = typename YV::execution_space;
  using T = typename YV::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Member = typename Policy::member_type;
  const index_t n_rows = x.extent(0), d = x.extent(1);
  EXA_REQUIRE(index_t(w.extent(0)) == d && index_t(y.extent(0)) == n_rows && index_t(y.extent(1)) == d &&
                  index_t(rstd.extent(0)) == n_rows,
              "exa::rmsnorm_forward: shapes x {}x{}, w {}, y {}x{}, rstd {} do not match", n_rows, d, w.extent(0),
              y.extent(0), y.extent(1), rstd.extent(0));
  if (n_rows == 0) return;
  const T eps_t = T(eps);
  const T inv_d = T(1) / T(d);
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(x, y) && w.stride(0) == 1) {
      // One row per iteration, vectorised along it (host_loops.hpp).
      const auto* px = x.data();
      const auto* pw = w.data();
      auto* py = y.data();
      const index_t sx = x.stride(0), sy = y.stride(0);
      Kokkos::parallel_for(
          "exa::rmsnorm::forward", Kokkos::RangePolicy<Exec>(exec, 0, n_rows), [=](const index_t n) {
            const auto* xr = px + n * sx;
            auto* yr = py + n * sy;
            const T r = T(1) / kx::sqrt(detail::dot16<T>(xr, xr, d) * inv_d + eps_t);
            for (index_t j = 0; j < d; ++j) yr[j] = T(xr[j]) * r * T(pw[j]);
            rstd(n) = r;
          });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::rmsnorm::forward", Policy(exec, n_rows, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const index_t n = team.league_rank();
        T ss = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d),
            [&](const index_t j, T& acc) {
              const T v = x(n, j);
              acc += v * v;
            },
            ss);
        const T r = T(1) / kx::sqrt(ss * inv_d + eps_t);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const index_t j) { y(n, j) = x(n, j) * r * w(j); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(n) = r; });
      });
}

// Backward of rmsnorm_forward given dy[N,d] and the saved rstd:
//   dw (+)= sum_n dy * x * rstd          (+= when accumulate_dw)
//   dx  (+)= rstd * (g - xhat * mean(g * xhat)), g = dy * w   (+= when accumulate_dx)
// dx may alias dy when accumulate_dx is false (dw is formed first).
template <class XV, class WV, class RV, class DYV, class DXV, class DWV>
void rmsnorm_backward(const XV& x, const WV& w, const RV& rstd, const DYV& dy, const DXV& dx, const DWV& dw,
                      bool accumulate_dw, bool accumulate_dx = false, const exec_of<DXV>& exec = exec_of<DXV>{}) {
  static_assert(XV::rank == 2 && WV::rank == 1 && RV::rank == 1 && DYV::rank == 2 && DXV::rank == 2 &&
                    DWV::rank == 1,
                "exa::rmsnorm_backward: x[N,d], w[d], rstd[N], dy[N,d], dx[N,d], dw[d]");
  using Exec = typename DXV::execution_space;
  using T = typename DXV::non_const_value_type;
  using TW = typename DWV::non_const_value_type;
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Member = typename Policy::member_type;
  const index_t n_rows = x.extent(0), d = x.extent(1);
  EXA_REQUIRE(index_t(w.extent(0)) == d && index_t(rstd.extent(0)) == n_rows && index_t(dy.extent(0)) == n_rows &&
                  index_t(dy.extent(1)) == d && index_t(dx.extent(0)) == n_rows && index_t(dx.extent(1)) == d &&
                  index_t(dw.extent(0)) == d,
              "exa::rmsnorm_backward: shapes x {}x{}, w {}, rstd {}, dy {}x{}, dx {}x{}, dw {} do not match", n_rows,
              d, w.extent(0), rstd.extent(0), dy.extent(0), dy.extent(1), dx.extent(0), dx.extent(1), dw.extent(0));

  // 1. dw: each work item owns CB adjacent columns and sums the rows in order.
  constexpr index_t CB = detail::RmsnormColumnBlock<Exec>::value;
  const index_t n_blocks = (d + CB - 1) / CB;
  Kokkos::parallel_for(
      "exa::rmsnorm::backward_dw", Kokkos::RangePolicy<Exec>(exec, 0, n_blocks), KOKKOS_LAMBDA(const index_t blk) {
        const index_t j0 = blk * CB;
        const index_t nj = (j0 + CB < d) ? CB : d - j0;
        double acc[CB];
        for (index_t c = 0; c < nj; ++c) acc[c] = accumulate_dw ? double(dw(j0 + c)) : 0.0;
        for (index_t n = 0; n < n_rows; ++n) {
          const double r = double(rstd(n));
          for (index_t c = 0; c < nj; ++c) acc[c] += double(dy(n, j0 + c)) * double(x(n, j0 + c)) * r;
        }
        for (index_t c = 0; c < nj; ++c) dw(j0 + c) = TW(acc[c]);
      });

  // 2. dx, one row per team.
  if (n_rows == 0) return;
  const T inv_d = T(1) / T(d);
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(x, dy, dx) && w.stride(0) == 1) {
      const auto* px = x.data();
      const auto* pw = w.data();
      const auto* pdy = dy.data();
      auto* pdx = dx.data();
      const index_t sx = x.stride(0), sg = dy.stride(0), sd = dx.stride(0);
      Kokkos::parallel_for(
          "exa::rmsnorm::backward_dx", Kokkos::RangePolicy<Exec>(exec, 0, n_rows), [=](const index_t n) {
            const auto* xr = px + n * sx;
            const auto* gr = pdy + n * sg;
            auto* dr = pdx + n * sd;
            const T r = rstd(n);
            T acc[16] = {};  // sum_j g_j * x_j, g = dy * w, in 16 partial sums
            index_t j = 0;
            for (; j + 16 <= d; j += 16)
              for (int l = 0; l < 16; ++l) acc[l] += T(gr[j + l]) * T(pw[j + l]) * T(xr[j + l]);
            T dot = 0;
            for (int l = 0; l < 16; ++l) dot += acc[l];
            for (; j < d; ++j) dot += T(gr[j]) * T(pw[j]) * T(xr[j]);
            const T c = dot * r * r * inv_d;
            if (accumulate_dx) {
              for (j = 0; j < d; ++j) dr[j] += r * (T(gr[j]) * T(pw[j]) - T(xr[j]) * c);
            } else {
              for (j = 0; j < d; ++j) dr[j] = r * (T(gr[j]) * T(pw[j]) - T(xr[j]) * c);
            }
          });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::rmsnorm::backward_dx", Policy(exec, n_rows, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const index_t n = team.league_rank();
        const T r = rstd(n);
        T dot = 0;  // sum_j g_j * x_j
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d),
            [&](const index_t j, T& acc) { acc += T(dy(n, j)) * T(w(j)) * T(x(n, j)); }, dot);
        const T c = dot * r * r * inv_d;  // mean(g * xhat) / rstd
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const index_t j) {
          const T v = r * (T(dy(n, j)) * T(w(j)) - T(x(n, j)) * c);
          if (accumulate_dx)
            dx(n, j) += v;
          else
            dx(n, j) = v;
        });
      });
}

}  // namespace exa::kernels
