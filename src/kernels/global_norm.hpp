#pragma once
// Squared L2 norm of a tensor, accumulated in double. The global gradient
// norm for clipping is the (MPI-)sum of these over every gradient shard.
#include "core/types.hpp"

namespace exa::kernels {

// Works on a View of any rank whose memory is contiguous (every ExaMoE tensor).
template <class V>
double global_sq_norm(const V& v) {
  using T = typename V::non_const_value_type;
  using Exec = typename V::execution_space;
  Kokkos::View<const T*, Kokkos::LayoutRight, typename V::device_type, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(v.data(), v.span());
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::global_sq_norm", Kokkos::RangePolicy<Exec>(0, flat.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        const double x = static_cast<double>(flat(i));
        acc += x * x;
      },
      s);
  return s;
}

}  // namespace exa::kernels
