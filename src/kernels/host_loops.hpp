#pragma once
// Host fast paths of the element-wise kernels (AdamW, SwiGLU, RMSNorm,
// permute), docs/architecture.md "Performance method". On a host execution
// space a kernel hands contiguous chunks of its data to a plain loop over
// raw pointers that the compiler vectorises (with EXAMOE_ARCH's AVX2/FMA or
// AVX-512); Kokkos spreads the chunks over the threads. Device spaces keep
// the element-per-thread kernels.
#include <cstdint>
#include <type_traits>

#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels::detail {

// True when Exec runs on the host (Serial, OpenMP, Threads).
template <class Exec>
constexpr bool host_exec = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

// Elements per chunk: large enough that a chunk amortises the dispatch, small
// enough that 2 threads split a 1M-element tensor evenly.
constexpr index_t kHostChunk = 8192;

// Calls f(i0, i1) for the chunks [i0, i1) of [0, total), in parallel on exec.
template <class Exec, class F>
void for_host_chunks(const char* label, const Exec& exec, index_t total, const F& f) {
  const index_t chunks = (total + kHostChunk - 1) / kHostChunk;
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Exec>(exec, 0, chunks), [=](const index_t c) {
    const index_t i0 = c * kHostChunk;
    f(i0, i0 + kHostChunk < total ? i0 + kHostChunk : total);
  });
}

// sum_j a[j] * b[j] over 16 running partial sums (a vectorisable order;
// a single running sum is a dependency chain the compiler may not reorder).
template <class T, class A, class B>
inline T dot16(const A* a, const B* b, index_t n) {
  T acc[16] = {};
  index_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += T(a[j + l]) * T(b[j + l]);
  T s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; j < n; ++j) s += T(a[j]) * T(b[j]);
  return s;
}

}  // namespace exa::kernels::detail
