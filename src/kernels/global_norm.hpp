#pragma once
// Squared L2 norm of a tensor, accumulated in double. The global gradient
// norm for clipping is the (MPI-)sum of these over every gradient shard.
//
// The flat element range is cut into fixed blocks; each block sums its
// squares with kNormLanes (8) independent double accumulators (element i goes to
// lane i % kNormLanes), combined pairwise in a fixed order, and the blocks are
// then reduced by parallel_reduce. The per-block arithmetic is therefore
// fixed by the data alone, the independent lanes let the compiler
// vectorise and hide add latency, and the result is bit-reproducible for a
// given backend and thread count. Host backends use long blocks; GPU
// backends use one short block per thread so neighbouring threads read
// neighbouring memory.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>
#include <type_traits>

#include "core/types.hpp"

namespace exa::kernels {

namespace detail {
constexpr std::size_t kNormLanes = 8;

template <class Exec>
constexpr std::size_t norm_block() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible ? 1024
                                                                                                : kNormLanes;
}
}  // namespace detail

namespace detail {
// Block b's sum of squares (elements [b*blk, min(n, (b+1)*blk)) of p): the
// one definition both forms below use, so their blocks agree bit for bit.
template <class T>
KOKKOS_INLINE_FUNCTION double block_sq_sum(const T* p, std::size_t n, std::size_t blk, std::size_t b) {
  const std::size_t i0 = b * blk;
  const std::size_t i1 = (n - i0 < blk) ? n : i0 + blk;
  double lane[kNormLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = i0;
  for (; i + kNormLanes <= i1; i += kNormLanes) {
    for (std::size_t j = 0; j < kNormLanes; ++j) {
      const double x = static_cast<double>(p[i + j]);
      lane[j] += x * x;
    }
  }
  for (std::size_t j = 0; i + j < i1; ++j) {
    const double x = static_cast<double>(p[i + j]);
    lane[j] += x * x;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace detail

// Works on a View of any rank whose memory is contiguous (every ExaMoE tensor).
template <class V>
double global_sq_norm(const V& v, const exec_of<V>& exec = exec_of<V>{}) {
  using Exec = typename V::execution_space;
  static_assert(detail::norm_block<Exec>() % detail::kNormLanes == 0,
                "exa::global_sq_norm: block must be a multiple of the lane count");
  const std::size_t blk = detail::norm_block<Exec>();  // captured by value
  const auto* const p = v.data();
  const std::size_t n = v.span();
  const std::size_t nblocks = (n + blk - 1) / blk;
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::global_sq_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nblocks),
      KOKKOS_LAMBDA(const std::size_t b, double& acc) { acc += detail::block_sq_sum(p, n, blk, b); }, s);
  return s;
}

namespace detail {
// sums(b) = block b's sum of squares for b in [b0, b1).
template <class Exec, class T, class Sums>
void block_sq_sums(const Exec& exec, const Sums& sums, const T* p, std::size_t n, std::size_t blk, std::size_t b0,
                   std::size_t b1) {
  if (b1 <= b0) return;
  Kokkos::parallel_for(
      "exa::global_sq_norm::blocks", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, b0, b1),
      KOKKOS_LAMBDA(const std::size_t b) { sums(b) = block_sq_sum(p, n, blk, b); });
}
}  // namespace detail

// global_sq_norm's result, bit for bit (the same blocks, reduced by the
// same parallel_reduce), with the blocks' sums computed first, range by
// range: once the blocks up to the end of pieces[i] ([begin, end)
// elements, ascending) are summed, after(i) runs, so that a caller can take
// the piece out of memory before the next is read (memory.offload_experts).
// (A std::function, not a template parameter: nvcc refuses a caller's local
// lambda type in the template arguments of a function with device lambdas.)
template <class V, class Piece>
double global_sq_norm_pieces(const V& v, const std::vector<Piece>& pieces, const std::function<void(std::size_t)>& after,
                             const exec_of<V>& exec = exec_of<V>{}) {
  using Exec = typename V::execution_space;
  const std::size_t blk = detail::norm_block<Exec>();
  const auto* const p = v.data();
  const std::size_t n = v.span();
  const std::size_t nblocks = (n + blk - 1) / blk;
  Kokkos::View<double*, typename V::memory_space> sums("exa::norm_block_sums", nblocks);
  std::size_t next = 0;  // the first block not summed yet
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const std::size_t end = std::max(next, std::min(nblocks, (std::size_t(pieces[k].end) + blk - 1) / blk));
    detail::block_sq_sums(exec, sums, p, n, blk, next, end);
    exec.fence();
    after(k);
    next = end;
  }
  detail::block_sq_sums(exec, sums, p, n, blk, next, nblocks);
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::global_sq_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nblocks),
      KOKKOS_LAMBDA(const std::size_t b, double& acc) { acc += sums(b); }, s);
  return s;
}

}  // namespace exa::kernels
