#pragma once
// mx[n] = max over the columns of m[n, :]: the first step of a softmax over
// rows whose columns one rank holds (a vocabulary-parallel caller then
// takes the max over the ranks).
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels {

template <class MV, class OV>
void row_max(const MV& m, const OV& mx) {
  using Exec = exec_of<OV>;
  using T = typename OV::non_const_value_type;
  const index_t cols = m.extent(1);
  Kokkos::parallel_for(
      "exa::kernels::row_max", Kokkos::RangePolicy<Exec>(0, m.extent(0)), KOKKOS_LAMBDA(const index_t r) {
        T x = T(m(r, 0));
        for (index_t j = 1; j < cols; ++j) x = kx::max(x, T(m(r, j)));
        mx(r) = x;
      });
}

}  // namespace exa::kernels
