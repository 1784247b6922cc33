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
#include <cstddef>
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

// Works on a View of any rank whose memory is contiguous (every ExaMoE tensor).
template <class V>
double global_sq_norm(const V& v, const exec_of<V>& exec = exec_of<V>{}) {
  using T = typename V::non_const_value_type;
  using Exec = typename V::execution_space;
  static_assert(detail::norm_block<Exec>() % detail::kNormLanes == 0,
                "exa::global_sq_norm: block must be a multiple of the lane count");
  const std::size_t blk = detail::norm_block<Exec>();  // captured by value
  const T* const p = v.data();
  const std::size_t n = v.span();
  const std::size_t nblocks = (n + blk - 1) / blk;
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::global_sq_norm", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nblocks),
      KOKKOS_LAMBDA(const std::size_t b, double& acc) {
        const std::size_t i0 = b * blk;
        const std::size_t i1 = (n - i0 < blk) ? n : i0 + blk;
        double lane[detail::kNormLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::size_t i = i0;
        for (; i + detail::kNormLanes <= i1; i += detail::kNormLanes) {
          for (std::size_t j = 0; j < detail::kNormLanes; ++j) {
            const double x = static_cast<double>(p[i + j]);
            lane[j] += x * x;
          }
        }
        for (std::size_t j = 0; i + j < i1; ++j) {
          const double x = static_cast<double>(p[i + j]);
          lane[j] += x * x;
        }
        acc += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      },
      s);
  return s;
}

}  // namespace exa::kernels
