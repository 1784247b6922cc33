#pragma once
// Token embedding: a row gather forward, a deterministic scatter-add backward.
//
//   forward   out[n, :] = table[tok[n], :]
//   backward  dtable[v, :] (+)= sum over n with tok[n] == v of dout[n, :]
//
// The backward is parallel over columns of the table: each thread owns a
// block of columns and walks the tokens in order, so every sum is formed in
// the same order on every backend and thread count, with no atomics. The
// total work is N*d, the same as a scatter. On host spaces a thread owns a
// block of kHostColumns adjacent columns (cache lines), on devices one
// column (coalesced across the warp).
//
// tokens must lie in [0, V): a token out of range is a caller error and is
// not checked here (the data loader validates its shards).
#include <cstdint>

#include "core/error.hpp"
#include "core/types.hpp"

namespace exa::kernels {

namespace detail {
// Columns per work item for column-parallel sums over rows in execution
// space Exec: a block of adjacent columns on host (whole cache lines), one
// column on devices (coalesced across threads).
template <class Exec>
struct ColumnBlock {
  static constexpr index_t value =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible ? 64 : 1;
};
}  // namespace detail

// out[n, :] = table[tok[n], :]; table [V,d], tokens [N] (int32), out [N,d].
template <class TableV, class TokV, class OutV>
void embedding_forward(const TableV& table, const TokV& tokens, const OutV& out,
                       const exec_of<OutV>& exec = exec_of<OutV>{}) {
  static_assert(TableV::rank == 2 && TokV::rank == 1 && OutV::rank == 2,
                "exa::embedding_forward: table[V,d], tokens[N], out[N,d]");
  using Exec = typename OutV::execution_space;
  const index_t n_tok = tokens.extent(0), d = table.extent(1);
  EXA_REQUIRE(index_t(out.extent(0)) == n_tok && index_t(out.extent(1)) == d,
              "exa::embedding_forward: out is {}x{}, expected {}x{}", out.extent(0), out.extent(1), n_tok, d);
  Kokkos::parallel_for(
      "exa::embedding::forward", Kokkos::RangePolicy<Exec>(exec, 0, n_tok * d), KOKKOS_LAMBDA(index_t i) {
        const index_t n = i / d, j = i % d;
        out(n, j) = table(tokens(n), j);
      });
}

// dtable[v, :] = (accumulate ? dtable[v, :] : 0) + sum_{n : tok[n] == v} dout[n, :],
// summed in token order (deterministic, no atomics).
template <class TokV, class DOutV, class DTableV>
void embedding_backward(const TokV& tokens, const DOutV& dout, const DTableV& dtable, bool accumulate,
                        const exec_of<DTableV>& exec = exec_of<DTableV>{}) {
  static_assert(TokV::rank == 1 && DOutV::rank == 2 && DTableV::rank == 2,
                "exa::embedding_backward: tokens[N], dout[N,d], dtable[V,d]");
  using Exec = typename DTableV::execution_space;
  using T = typename DTableV::non_const_value_type;
  const index_t n_tok = tokens.extent(0), d = dtable.extent(1), vocab = dtable.extent(0);
  EXA_REQUIRE(index_t(dout.extent(0)) == n_tok && index_t(dout.extent(1)) == d,
              "exa::embedding_backward: dout is {}x{}, expected {}x{}", dout.extent(0), dout.extent(1), n_tok, d);
  const index_t cb = detail::ColumnBlock<Exec>::value;
  const index_t n_blocks = (d + cb - 1) / cb;
  Kokkos::parallel_for(
      "exa::embedding::backward", Kokkos::RangePolicy<Exec>(exec, 0, n_blocks), KOKKOS_LAMBDA(index_t blk) {
        const index_t j0 = blk * cb;
        const index_t j1 = (j0 + cb < d) ? j0 + cb : d;
        if (!accumulate)
          for (index_t v = 0; v < vocab; ++v)
            for (index_t j = j0; j < j1; ++j) dtable(v, j) = T(0);
        for (index_t n = 0; n < n_tok; ++n) {
          const index_t v = tokens(n);
          for (index_t j = j0; j < j1; ++j) dtable(v, j) += dout(n, j);
        }
      });
}

}  // namespace exa::kernels
