#pragma once
// Test helpers shared by the communicator tests: Views in the default memory
// space (device in CUDA builds, which exercises the MPI backend's host
// staging), built from a host-side formula and read back as vectors.
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/types.hpp"

namespace exa::test {

inline int world_rank() { return exa::comm_rank(MPI_COMM_WORLD); }
inline int world_size() { return exa::comm_size(MPI_COMM_WORLD); }

template <class T>
using DView = Kokkos::View<T*, exa::Layout, exa::MemSpace>;
template <class T>
using HView = Kokkos::View<T*, exa::Layout, Kokkos::HostSpace>;

// d(i) = f(i) for i < n.
template <class T, class F>
DView<T> make(std::size_t n, F f) {
  HView<T> h("h", n);
  for (std::size_t i = 0; i < n; ++i) h(i) = static_cast<T>(f(static_cast<long>(i)));
  DView<T> d("d", n);
  Kokkos::deep_copy(d, h);
  return d;
}

template <class T>
std::vector<T> to_vec(const DView<T>& d) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, d);
  return std::vector<T>(h.data(), h.data() + h.extent(0));
}

}  // namespace exa::test
