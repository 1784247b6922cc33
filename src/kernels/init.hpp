#pragma once
// Parameter initialisation, identical in every parallel layout.
//
// init_normal fills a shard with N(0, std^2) draws from Philox-4x32-10 keyed
// by (seed, global parameter name), the counter being the element's global
// flat (row-major) index: element i of the global tensor is
//     float(std * philox_normal(philox_key(seed, name), i))
// whichever rank fills it and however the tensor is split. A rank holding
// the contiguous range [offset, offset + n) of the flattened global tensor
// passes its shard and `global_offset = offset`. A rank holding an N-d box
// of the tensor (tensor or expert parallelism), or a contiguous range of the
// box's own row-major order (ZeRO on top), uses init_normal_box: each element
// is drawn at its global index (kernels/box_index.hpp), so the piece holds
// exactly the whole tensor's values at those positions, bit for bit.
//
// Views may be of any rank; they must be contiguous LayoutRight (rank <= 1:
// any contiguous layout), since the flat position in memory is the global
// index. Runs in the View's execution space.
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/types.hpp"
#include "kernels/box_index.hpp"

namespace exa::kernels {

namespace init_detail {

template <class V>
auto flat(const V& v, const char* what) {
  static_assert(std::is_same<typename V::value_type, scalar_of<V>>::value, "init: View must be writable");
  constexpr bool row_major =
      static_cast<int>(V::rank) <= 1 || std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value;
  static_assert(row_major, "init: View must be LayoutRight (row-major global order)");
  EXA_REQUIRE(v.span_is_contiguous(), "{}: '{}' must be contiguous", what, v.label());
  using F = Kokkos::View<typename V::value_type*, Kokkos::LayoutRight, typename V::device_type,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return F(v.data(), v.size());
}

}  // namespace init_detail

// v[i] = std * N(0,1)[key, global_offset + i]  (the core overload).
template <class V>
void init_normal(const V& v, PhiloxKey key, double stddev, index_t global_offset = 0) {
  using T = scalar_of<V>;
  static_assert(std::is_floating_point<T>::value, "init_normal: View must hold float or double");
  EXA_REQUIRE(global_offset >= 0, "init_normal: global offset must be >= 0, got {}", global_offset);
  EXA_REQUIRE(stddev >= 0.0, "init_normal: std must be >= 0, got {}", stddev);
  const auto f = init_detail::flat(v, "init_normal");
  const std::uint64_t off = static_cast<std::uint64_t>(global_offset);
  Kokkos::parallel_for(
      "exa::init::normal", Kokkos::RangePolicy<exec_of<V>>(0, f.extent(0)), KOKKOS_LAMBDA(const std::size_t i) {
        f(i) = static_cast<T>(stddev * philox_normal(key, off + i));
      });
}

// Keyed by (seed, global parameter name), e.g. "layers.3.attn.wq.weight".
template <class V>
void init_normal(const V& v, std::uint64_t seed, const std::string& name, double stddev, index_t global_offset = 0) {
  init_normal(v, philox_key(seed, name.c_str()), stddev, global_offset);
}

// v[i] = std * N(0,1)[key, box(box_offset + i)]: v holds elements
// [box_offset, box_offset + n) of the box's row-major order. One kernel; the
// draw is the same expression as init_normal's, so a whole-tensor box gives
// init_normal's values.
template <class V>
void init_normal_box(const V& v, PhiloxKey key, double stddev, const BoxIndex& box, index_t box_offset = 0) {
  using T = scalar_of<V>;
  static_assert(std::is_floating_point<T>::value, "init_normal_box: View must hold float or double");
  EXA_REQUIRE(box_offset >= 0, "init_normal_box: offset must be >= 0, got {}", box_offset);
  EXA_REQUIRE(stddev >= 0.0, "init_normal_box: std must be >= 0, got {}", stddev);
  const auto f = init_detail::flat(v, "init_normal_box");
  const std::uint64_t off = static_cast<std::uint64_t>(box_offset);
  EXA_REQUIRE(off + f.extent(0) <= box.numel,
              "init_normal_box: '{}' holds elements [{}, {}) of a box of {} elements", v.label(), off,
              off + f.extent(0), box.numel);
  const BoxIndex map = box;  // captured by value
  Kokkos::parallel_for(
      "exa::init::normal_box", Kokkos::RangePolicy<exec_of<V>>(0, f.extent(0)), KOKKOS_LAMBDA(const std::size_t i) {
        f(i) = static_cast<T>(stddev * philox_normal(key, map(off + i)));
      });
}

template <class V>
void init_normal_box(const V& v, std::uint64_t seed, const std::string& name, double stddev, const BoxIndex& box,
                     index_t box_offset = 0) {
  init_normal_box(v, philox_key(seed, name.c_str()), stddev, box, box_offset);
}

// v[i] = value (norm weights start at 1, biases and optimizer state at 0).
template <class V>
void fill_constant(const V& v, scalar_of<V> value) {
  const auto f = init_detail::flat(v, "fill_constant");
  Kokkos::parallel_for(
      "exa::init::constant", Kokkos::RangePolicy<exec_of<V>>(0, f.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { f(i) = value; });
}

}  // namespace exa::kernels
