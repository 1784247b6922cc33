#pragma once
// SwiGLU gate (docs/architecture.md, "The model": w2(silu(w1 x) * w3 x)), elementwise on [N,F]:
//   h = silu(a) * b,   silu(a) = a * sigmoid(a) = a / (1 + exp(-a))
// Backward given dh:
//   da = dh * b * sigmoid(a) * (1 + a * (1 - sigmoid(a)))
//   db = dh * silu(a)
// Each element is read before it is written, so h may alias a or b, and
// da/db may alias a, b or dh (one each). Any operand may hold exa::bf16
// (a tensor stored in bf16): the arithmetic is fp32, and a bf16 result is
// rounded once, when it is stored.
//
// Both passes run over a 2-D (row, column) MDRangePolicy, so no element pays
// for a 64-bit divide, the innermost loop walks a contiguous row (column
// halves of a wider tensor are fine: only the row stride differs), and the
// GPU backends get a 2-D grid.
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"

namespace exa::kernels {

namespace detail {
// [n, f] iteration space, rows outer, columns inner (LayoutRight order).
template <class Exec>
Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                      Kokkos::IndexType<index_t>>
swiglu_policy(const Exec& exec, index_t n, index_t f) {
  return {exec, {0, 0}, {n, f}};
}
}  // namespace detail

template <class AV, class BV, class HV>
void swiglu_forward(const AV& a, const BV& b, const HV& h, const exec_of<HV>& exec = exec_of<HV>{}) {
  static_assert(AV::rank == 2 && BV::rank == 2 && HV::rank == 2, "exa::swiglu_forward: a, b, h must be [N,F]");
  using Exec = typename HV::execution_space;
  using S = typename HV::non_const_value_type;  // stored (bf16: rounded once, at the end)
  using T = arith_t<S>;
  const index_t n = a.extent(0), f = a.extent(1);
  EXA_REQUIRE(b.extent(0) == a.extent(0) && b.extent(1) == a.extent(1) && h.extent(0) == a.extent(0) &&
                  h.extent(1) == a.extent(1),
              "exa::swiglu_forward: shapes a {}x{}, b {}x{}, h {}x{} differ", n, f, b.extent(0), b.extent(1),
              h.extent(0), h.extent(1));
  if (n == 0 || f == 0) return;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(a, b, h)) {
      // One row per iteration, vectorised along it (host_loops.hpp); a and
      // b may be the column halves of one fused projection.
      const auto* pa = a.data();
      const auto* pb = b.data();
      S* ph = h.data();
      const index_t sa = a.stride(0), sb = b.stride(0), sh = h.stride(0);
      Kokkos::parallel_for("exa::swiglu::forward", Kokkos::RangePolicy<Exec>(exec, 0, n), [=](const index_t r) {
        const auto* ar = pa + r * sa;
        const auto* br = pb + r * sb;
        S* hr = ph + r * sh;
        for (index_t c = 0; c < f; ++c) {
          const T av = T(ar[c]);
          hr[c] = S(av / (T(1) + detail::host_exp(-av)) * T(br[c]));
        }
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::swiglu::forward", detail::swiglu_policy<Exec>(exec, n, f),
      KOKKOS_LAMBDA(const index_t r, const index_t c) {
        const T av = T(a(r, c));
        const T bv = T(b(r, c));
        h(r, c) = S(av / (T(1) + kx::exp(-av)) * bv);
      });
}

template <class AV, class BV, class DHV, class DAV, class DBV>
void swiglu_backward(const AV& a, const BV& b, const DHV& dh, const DAV& da, const DBV& db,
                     const exec_of<DAV>& exec = exec_of<DAV>{}) {
  static_assert(AV::rank == 2 && BV::rank == 2 && DHV::rank == 2 && DAV::rank == 2 && DBV::rank == 2,
                "exa::swiglu_backward: a, b, dh, da, db must be [N,F]");
  using Exec = typename DAV::execution_space;
  using S = typename DAV::non_const_value_type;
  using T = arith_t<S>;
  const index_t n = a.extent(0), f = a.extent(1);
  const bool same = b.extent(0) == a.extent(0) && b.extent(1) == a.extent(1) && dh.extent(0) == a.extent(0) &&
                    dh.extent(1) == a.extent(1) && da.extent(0) == a.extent(0) && da.extent(1) == a.extent(1) &&
                    db.extent(0) == a.extent(0) && db.extent(1) == a.extent(1);
  EXA_REQUIRE(same, "exa::swiglu_backward: a, b, dh, da, db must all be {}x{}", n, f);
  if (n == 0 || f == 0) return;
  if constexpr (detail::host_exec<Exec>) {
    if (detail::rows_contiguous(a, b, dh, da, db)) {
      const auto* pa = a.data();
      const auto* pb = b.data();
      const auto* pg = dh.data();
      S* pda = da.data();
      S* pdb = db.data();
      const index_t sa = a.stride(0), sb = b.stride(0), sg = dh.stride(0), sda = da.stride(0), sdb = db.stride(0);
      Kokkos::parallel_for("exa::swiglu::backward", Kokkos::RangePolicy<Exec>(exec, 0, n), [=](const index_t r) {
        const auto* ar = pa + r * sa;
        const auto* br = pb + r * sb;
        const auto* gr = pg + r * sg;
        S* dar = pda + r * sda;
        S* dbr = pdb + r * sdb;
        // In place (da over a, db over b) reads a row's a, b before writing it.
        for (index_t c = 0; c < f; ++c) {
          const T av = T(ar[c]);
          const T bv = T(br[c]);
          const T g = T(gr[c]);
          const T sig = T(1) / (T(1) + detail::host_exp(-av));
          dar[c] = S(g * bv * sig * (T(1) + av * (T(1) - sig)));
          dbr[c] = S(g * (av * sig));
        }
      });
      return;
    }
  }
  Kokkos::parallel_for(
      "exa::swiglu::backward", detail::swiglu_policy<Exec>(exec, n, f),
      KOKKOS_LAMBDA(const index_t r, const index_t c) {
        const T av = T(a(r, c));
        const T bv = T(b(r, c));
        const T g = T(dh(r, c));
        const T sig = T(1) / (T(1) + kx::exp(-av));
        const T silu = av * sig;
        da(r, c) = S(g * bv * sig * (T(1) + av * (T(1) - sig)));
        db(r, c) = S(g * silu);
      });
}

}  // namespace exa::kernels
