#pragma once
// Deterministic, layout-independent checksums of tensor contents.
//
// A tensor is read as a flat global array in row-major (PyTorch/HDF5) order.
// Its checksum is
//
//     C = sum over elements i (mod 2^64) of checksum_mix64(i, bits(x_i))
//
// where i is the element's *global* flat index and bits(x) its bit pattern
// (zero-extended to 64 bits; so -0.0 != +0.0 and NaN payloads count).
// Because the terms are added, a rank holding elements [off, off + n) of a
// global tensor computes checksum(shard, off), and the partials of any
// sharding add up (mod 2^64: unsigned overflow, e.g. MPI_Allreduce with
// MPI_UINT64_T and MPI_SUM) to the checksum of the whole tensor. Integer sums
// are associative, so the result is also independent of thread count and
// backend.
//
// checksum_mix64 is a bijection in the value for a fixed index, so changing
// any single element always changes C; the index enters twice, through two
// different mixes, so that swapping or moving elements changes C except
// with probability ~2^-64.
//
// A checkpoint stores C per dataset and a Merkle root over all of its
// (name, C) pairs (checksum_merkle_root; XXH64, byte layout documented below
// so that other tools can recompute it).
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/box_index.hpp"

namespace exa::kernels {

// splitmix64's finaliser (Steele, Lea, Flood 2014; Stafford's "Mix13"): a
// bijection of uint64 with full avalanche.
KOKKOS_FORCEINLINE_FUNCTION std::uint64_t checksum_fmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The contribution of the element with global index `index` and bit pattern
// `bits`:  fmix(fmix(bits ^ fmix(index + G)) ^ (index * K + G)).
KOKKOS_FORCEINLINE_FUNCTION std::uint64_t checksum_mix64(std::uint64_t index, std::uint64_t bits) {
  const std::uint64_t G = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio
  const std::uint64_t K = 0xD6E8FEB86659FD93ull;  // odd
  const std::uint64_t h = checksum_fmix64(bits ^ checksum_fmix64(index + G));
  return checksum_fmix64(h ^ (index * K + G));
}

// Bit pattern of a trivially copyable value of 1, 2, 4 or 8 bytes
// (float, double, integers, exa::bf16, half), zero-extended.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION std::uint64_t checksum_bits(const T& x) {
  static_assert(std::is_trivially_copyable<T>::value, "checksum: element type must be trivially copyable");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "checksum: element type must be 1, 2, 4 or 8 bytes");
  if constexpr (sizeof(T) == 1) {
    std::uint8_t u;
    std::memcpy(&u, &x, 1);
    return u;
  } else if constexpr (sizeof(T) == 2) {
    std::uint16_t u;
    std::memcpy(&u, &x, 2);
    return u;
  } else if constexpr (sizeof(T) == 4) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  } else {
    std::uint64_t u;
    std::memcpy(&u, &x, 8);
    return u;
  }
}

// Partial checksum of `v`, whose first element (in row-major order) is
// element `global_offset` of the flat global tensor. Any rank up to 4 in any
// layout (a LayoutLeft or strided View is read in its logical row-major
// order, so it checksums like its LayoutRight copy); contiguous LayoutRight
// Views of any rank. Runs in v's execution space. An empty View gives 0.
template <class V>
std::uint64_t checksum(const V& v, index_t global_offset = 0, const exec_of<V>& exec = exec_of<V>{}) {
  using T = scalar_of<V>;
  using Exec = exec_of<V>;
  EXA_REQUIRE(global_offset >= 0, "checksum: global offset must be >= 0, got {}", global_offset);
  const std::uint64_t off = static_cast<std::uint64_t>(global_offset);
  constexpr int R = static_cast<int>(V::rank);
  const std::size_t n = v.size();
  std::uint64_t sum = 0;
  const bool row_major_flat =
      v.span_is_contiguous() && (R <= 1 || std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value);
  if (row_major_flat) {
    Kokkos::View<const T*, Kokkos::LayoutRight, typename V::device_type, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        flat(v.data(), n);
    Kokkos::parallel_reduce(
        "exa::checksum::flat", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) {
          acc += checksum_mix64(off + i, checksum_bits(flat(i)));
        },
        sum);
    return sum;
  }
  if constexpr (R == 1) {
    Kokkos::parallel_reduce(
        "exa::checksum::strided", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) { acc += checksum_mix64(off + i, checksum_bits(v(i))); },
        sum);
  } else if constexpr (R == 2) {
    const std::size_t e1 = v.extent(1);
    Kokkos::parallel_reduce(
        "exa::checksum::strided", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) {
          acc += checksum_mix64(off + i, checksum_bits(v(i / e1, i % e1)));
        },
        sum);
  } else if constexpr (R == 3) {
    const std::size_t e1 = v.extent(1), e2 = v.extent(2);
    Kokkos::parallel_reduce(
        "exa::checksum::strided", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) {
          const std::size_t i2 = i % e2, r = i / e2;
          acc += checksum_mix64(off + i, checksum_bits(v(r / e1, r % e1, i2)));
        },
        sum);
  } else if constexpr (R == 4) {
    const std::size_t e1 = v.extent(1), e2 = v.extent(2), e3 = v.extent(3);
    Kokkos::parallel_reduce(
        "exa::checksum::strided", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) {
          const std::size_t i3 = i % e3, r3 = i / e3;
          const std::size_t i2 = r3 % e2, r2 = r3 / e2;
          acc += checksum_mix64(off + i, checksum_bits(v(r2 / e1, r2 % e1, i2, i3)));
        },
        sum);
  } else {
    EXA_REQUIRE(false, "checksum: non-contiguous or non-LayoutRight Views of rank {} are not supported", R);
  }
  return sum;
}

// Partial checksum of a piece of an N-d box of the global tensor: `v` holds
// elements [box_offset, box_offset + n) of the box's row-major order, each
// counted at its global index box(k) (kernels/box_index.hpp). For a whole
// tensor box this is checksum(v, box_offset). Contiguous Views of rank <= 1.
template <class V>
std::uint64_t checksum_box(const V& v, const BoxIndex& box, index_t box_offset = 0) {
  using T = scalar_of<V>;
  using Exec = exec_of<V>;
  static_assert(static_cast<int>(V::rank) <= 1, "checksum_box: a flat View of the piece");
  EXA_REQUIRE(box_offset >= 0, "checksum_box: offset must be >= 0, got {}", box_offset);
  EXA_REQUIRE(v.span_is_contiguous(), "checksum_box: '{}' must be contiguous", v.label());
  const std::uint64_t off = static_cast<std::uint64_t>(box_offset);
  const std::size_t n = v.size();
  EXA_REQUIRE(off + n <= box.numel, "checksum_box: '{}' holds elements [{}, {}) of a box of {} elements", v.label(),
              off, off + n, box.numel);
  Kokkos::View<const T*, Kokkos::LayoutRight, typename V::device_type, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat(
      v.data(), n);
  const BoxIndex map = box;  // captured by value
  std::uint64_t sum = 0;
  Kokkos::parallel_reduce(
      "exa::checksum::box", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(const std::size_t i, std::uint64_t& acc) {
        acc += checksum_mix64(map(off + i), checksum_bits(flat(i)));
      },
      sum);
  return sum;
}

// Combines the partial checksums of disjoint shards of one tensor.
KOKKOS_FORCEINLINE_FUNCTION constexpr std::uint64_t checksum_combine(std::uint64_t a, std::uint64_t b) {
  return a + b;  // mod 2^64
}

// Merkle root over an ordered list of (name, checksum) pairs (host only).
// Byte layout, all integers little-endian, H = XXH64 with seed 0:
//   leaf(name, c) = H(0x00 | u64 len(name) | name bytes | u64 c)
//   node(l, r)    = H(0x01 | u64 l | u64 r)
// Each level pairs neighbours left to right; an odd last node moves up
// unchanged. One entry: its leaf. No entries: H(0x02).
// The order is the caller's: checkpoints pass their datasets sorted by full
// path so that the root does not depend on the writer.
std::uint64_t checksum_leaf(const std::string& name, std::uint64_t checksum);
std::uint64_t checksum_merkle_root(const std::vector<std::pair<std::string, std::uint64_t>>& entries);

// 16 lower-case hex digits (for attributes and logs).
std::string checksum_hex(std::uint64_t c);

}  // namespace exa::kernels
