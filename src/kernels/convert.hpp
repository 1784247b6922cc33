#pragma once
// fp32 <-> bf16 conversion of whole tensors (bf16 is ExaMoE's storage and
// communication format; arithmetic stays in fp32). fp32 -> bf16 rounds to
// nearest, ties to even, NaN stays NaN, overflow goes to +-inf (exa::to_bf16,
// as torch's .to(torch.bfloat16)); bf16 -> fp32 is exact.
//
// Both Views must hold contiguous memory of the same span and the same
// layout (every ExaMoE tensor is LayoutRight); any rank. The kernel runs in
// the destination View's execution space; both Views must be accessible from
// it.
#include <type_traits>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace exa::kernels {

namespace convert_detail {

template <class V>
auto flat(const V& v) {
  using F = Kokkos::View<typename V::value_type*, Kokkos::LayoutRight, typename V::device_type,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return F(v.data(), v.span());
}

template <class S, class D>
void check_pair(const S& src, const D& dst, const char* what) {
  static_assert(std::is_same<typename S::array_layout, typename D::array_layout>::value,
                "convert: source and destination must have the same layout");
  static_assert(static_cast<int>(S::rank) == static_cast<int>(D::rank),
                "convert: source and destination must have the same rank");
  static_assert(Kokkos::SpaceAccessibility<exec_of<D>, typename S::memory_space>::accessible,
                "convert: source must be accessible from the destination's execution space");
  for (int r = 0; r < static_cast<int>(S::rank); ++r) {
    EXA_REQUIRE(src.extent(r) == dst.extent(r), "{}: extent {} differs: source {} vs destination {}", what, r,
                src.extent(r), dst.extent(r));
  }
  EXA_REQUIRE(src.span_is_contiguous() && dst.span_is_contiguous(),
              "{}: tensors must be contiguous (source '{}', destination '{}')", what, src.label(), dst.label());
}

}  // namespace convert_detail

// dst[i] = round_to_nearest_even_bf16(src[i]).
template <class S, class D>
void fp32_to_bf16(const S& src, const D& dst, const exec_of<D>& exec = exec_of<D>{}) {
  static_assert(std::is_same<scalar_of<S>, float>::value, "fp32_to_bf16: source must hold float");
  static_assert(std::is_same<typename D::value_type, bf16>::value, "fp32_to_bf16: destination must hold exa::bf16");
  convert_detail::check_pair(src, dst, "fp32_to_bf16");
  const auto s = convert_detail::flat(src);
  const auto d = convert_detail::flat(dst);
  Kokkos::parallel_for(
      "exa::convert::fp32_to_bf16", Kokkos::RangePolicy<exec_of<D>>(exec, 0, d.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { d(i) = to_bf16(s(i)); });
}

// dst[i] = float(src[i]) (exact).
template <class S, class D>
void bf16_to_fp32(const S& src, const D& dst, const exec_of<D>& exec = exec_of<D>{}) {
  static_assert(std::is_same<scalar_of<S>, bf16>::value, "bf16_to_fp32: source must hold exa::bf16");
  static_assert(std::is_same<typename D::value_type, float>::value, "bf16_to_fp32: destination must hold float");
  convert_detail::check_pair(src, dst, "bf16_to_fp32");
  const auto s = convert_detail::flat(src);
  const auto d = convert_detail::flat(dst);
  Kokkos::parallel_for(
      "exa::convert::bf16_to_fp32", Kokkos::RangePolicy<exec_of<D>>(exec, 0, d.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { d(i) = to_float(s(i)); });
}

// v[i] = float(bf16(v[i])) in place: an fp32 tensor holding what storing
// it in bf16 would keep (the routed experts' ea and eb where a dispatcher
// keeps them in fp32; model/seams/token_dispatcher.hpp, stores_bf16).
template <class V>
void round_through_bf16(const V& v, const exec_of<V>& exec = exec_of<V>{}) {
  static_assert(std::is_same<typename V::value_type, float>::value, "round_through_bf16: the tensor must hold float");
  EXA_REQUIRE(v.span_is_contiguous(), "round_through_bf16: tensor '{}' must be contiguous", v.label());
  const auto f = convert_detail::flat(v);
  Kokkos::parallel_for(
      "exa::convert::round_through_bf16", Kokkos::RangePolicy<exec_of<V>>(exec, 0, f.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { f(i) = to_float(to_bf16(f(i))); });
}

}  // namespace exa::kernels
