#pragma once
// Slices and sizes of the flat float buffers that DataParallel and
// ZeroEngine keep (docs/architecture.md, "Data parallelism and ZeRO").

#include <cstddef>
#include <cstdint>

#include "core/types.hpp"

namespace exa::parallel::data::flat {

inline View1<float> range(const View1<float>& v, std::int64_t lo, std::int64_t n) {
  return Kokkos::subview(v, Kokkos::make_pair(std::size_t(lo), std::size_t(lo + n)));
}

inline double bytes(const View1<float>& v) { return double(v.span() * sizeof(float)); }

}  // namespace exa::parallel::data::flat
