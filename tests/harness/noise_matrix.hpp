#pragma once
// A device matrix of splitmix_noise values (element i*cols + j of `seed`),
// the same on every rank and backend.
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/types.hpp"
#include "harness/splitmix_noise.hpp"

namespace exa::test {

template <class T>
Kokkos::View<T**, Layout, Device> noise_matrix(const char* name, std::size_t rows, std::size_t cols,
                                               std::uint64_t seed) {
  Kokkos::View<T**, Layout, Device> v(std::string(name), rows, cols);
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) h(i, j) = T(splitmix_noise(seed, i * cols + j));
  Kokkos::deep_copy(v, h);
  return v;
}

}  // namespace exa::test
