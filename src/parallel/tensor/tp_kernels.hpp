#pragma once
// Elementwise helpers of the tensor-parallel seams (free functions: CUDA
// extended lambdas may not live in private members).
#include "core/types.hpp"

namespace exa::parallel::tensor::tp_detail {

// y = t (+ y when accumulate), on [N,c].
template <class YV, class TV>
void assign_or_add(const YV& y, const TV& t, bool accumulate) {
  using Exec = exec_of<YV>;
  const index_t n = y.extent(0), c = y.extent(1);
  Kokkos::parallel_for(
      "exa::tp::assign_or_add", Kokkos::RangePolicy<Exec>(0, n * c), KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / c, j = i % c;
        y(r, j) = accumulate ? y(r, j) + t(r, j) : t(r, j);
      });
}

}  // namespace exa::parallel::tensor::tp_detail
