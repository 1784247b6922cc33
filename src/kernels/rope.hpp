#pragma once
// Rotary position embedding (docs/architecture.md, "The model"), half-split ("rotate_half") pairing:
// element i pairs with i + hd/2, i in [0, hd/2), rotated by
//   angle(pos, i) = pos * theta^(-2i/hd),   pos = t + pos_offset.
// In place on q or k stored as x[B, T, H, hd] (the attention code views its
// projection output [B*T, H*hd] as that, see view_as_bthd):
//   x[i]      <- x[i] cos - x[i+hd/2] sin
//   x[i+hd/2] <- x[i+hd/2] cos + x[i] sin
// The backward is the transpose, a rotation by -angle, in place on the gradient.
//
// Angles follow the PyTorch reference's arithmetic in the data type T:
//   inv_freq = 1 / theta^(arange(0, hd, 2) / hd)   (each step rounded to T)
//   angle    = T(pos) * inv_freq                   (rounded to T)
//   cos, sin of that T angle.
// The power is evaluated in double and rounded once to T (correctly rounded).
// PyTorch's CPU kernels use SLEEF's 1-ulp powf, which agrees bit for bit
// for hd = 8..128 in powers of two and theta = 1e4 or 5e5, and differs by
// one ulp in about 1.4% of the other (hd, i) pairs; since angle = pos *
// inv_freq, rounding the angle itself in T is what makes matching the fp32
// reference to 1e-6 possible at long positions.
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels {

// Packed sequences (kernels/attention.hpp's documents): positions restart
// at each document, so row t of sequence b is rotated by the angle of
// t + pos_offset - start[b * stride + t + pos_offset]. Null: no documents.
struct RopeDocuments {
  const std::int32_t* start = nullptr;
  index_t stride = 0;
};

namespace detail {

template <class T>
KOKKOS_INLINE_FUNCTION T rope_inv_freq(index_t i, index_t hd, double theta) {
  const T e = T(2 * i) / T(hd);
  const T p = T(kx::pow(double(T(theta)), double(e)));
  return T(1) / p;
}

template <class T>
KOKKOS_INLINE_FUNCTION T rope_angle(index_t pos, index_t i, index_t hd, double theta) {
  return T(pos) * rope_inv_freq<T>(i, hd, theta);
}

inline void rope_check(index_t hd, const char* what) {
  EXA_REQUIRE(hd > 0 && hd % 2 == 0, "{}: head dim {} must be even", what, hd);
}

// x[b,t,h,i], x[b,t,h,i+half] <- rotation by `sign` * angle(t + pos_offset, i).
// CosSin(pos, i, c, s) provides the cosine and sine.
template <class XV, class CosSin>
void rope_apply(const char* label, const XV& x, index_t pos_offset, int sign, const CosSin& cs,
                const exec_of<XV>& exec, RopeDocuments docs = {}) {
  using Exec = typename XV::execution_space;
  using T = typename XV::non_const_value_type;
  const index_t nb = x.extent(0), nt = x.extent(1), nh = x.extent(2), half = x.extent(3) / 2;
  const T sg = T(sign);
  if (nb == 0 || nt == 0 || nh == 0 || half == 0) return;
  // (b, t, h) on a 3-D grid, the contiguous pair index i innermost: no
  // per-element integer division, and each cos/sin row is read in order.
  using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                                       Kokkos::IndexType<index_t>>;
  Kokkos::parallel_for(
      label, Policy(exec, {0, 0, 0}, {nb, nt, nh}), KOKKOS_LAMBDA(const index_t b, const index_t t, const index_t h) {
        const index_t at = t + pos_offset;
        const index_t pos = docs.start == nullptr ? at : at - docs.start[b * docs.stride + at];
        for (index_t i = 0; i < half; ++i) {
          T c, s;
          cs(pos, i, c, s);
          s = sg * s;
          const T x1 = x(b, t, h, i), x2 = x(b, t, h, i + half);
          x(b, t, h, i) = x1 * c - x2 * s;
          x(b, t, h, i + half) = x2 * c + x1 * s;
        }
      });
}

template <class T>
struct RopeDirect {
  index_t hd;
  double theta;
  KOKKOS_INLINE_FUNCTION void operator()(index_t pos, index_t i, T& c, T& s) const {
    const T a = rope_angle<T>(pos, i, hd, theta);
    c = kx::cos(a);
    s = kx::sin(a);
  }
};

template <class TableV>
struct RopeLookup {
  TableV cos, sin;
  KOKKOS_INLINE_FUNCTION void operator()(index_t pos, index_t i, typename TableV::non_const_value_type& c,
                                         typename TableV::non_const_value_type& s) const {
    c = cos(pos, i);
    s = sin(pos, i);
  }
};

}  // namespace detail

// Precomputed cos/sin of angle(pos, i) for pos in [0, max_pos), i in [0, hd/2),
// bit-identical to what the table-free overloads compute.
template <class T, class D = Device>
struct RopeTable {
  Kokkos::View<T**, Kokkos::LayoutRight, D> cos, sin;
  index_t head_dim = 0;
  double theta = 0;
  index_t max_pos() const { return cos.extent(0); }
};

template <class T, class D = Device>
RopeTable<T, D> make_rope_table(index_t max_pos, index_t head_dim, double theta = 10000.0,
                                const typename D::execution_space& exec = typename D::execution_space{}) {
  detail::rope_check(head_dim, "exa::make_rope_table");
  using Exec = typename D::execution_space;
  RopeTable<T, D> tab;
  tab.head_dim = head_dim;
  tab.theta = theta;
  const index_t half = head_dim / 2;
  tab.cos = Kokkos::View<T**, Kokkos::LayoutRight, D>(
      Kokkos::view_alloc(exec, std::string("exa::rope::cos"), Kokkos::WithoutInitializing), max_pos, half);
  tab.sin = Kokkos::View<T**, Kokkos::LayoutRight, D>(
      Kokkos::view_alloc(exec, std::string("exa::rope::sin"), Kokkos::WithoutInitializing), max_pos, half);
  auto c = tab.cos;
  auto s = tab.sin;
  const detail::RopeDirect<T> direct{head_dim, theta};
  if (max_pos == 0 || half == 0) return tab;
  using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                                       Kokkos::IndexType<index_t>>;
  Kokkos::parallel_for(
      "exa::rope::table", Policy(exec, {0, 0}, {max_pos, half}), KOKKOS_LAMBDA(const index_t pos, const index_t i) {
        T cv, sv;
        direct(pos, i, cv, sv);
        c(pos, i) = cv;
        s(pos, i) = sv;
      });
  return tab;
}

// In-place RoPE on x[B,T,H,hd] at positions t + pos_offset (angles computed inline).
template <class XV>
void rope_forward(const XV& x, double theta = 10000.0, index_t pos_offset = 0,
                  const exec_of<XV>& exec = exec_of<XV>{}) {
  static_assert(XV::rank == 4, "exa::rope_forward: x must be rank 4 [B, T, H, hd]");
  using T = typename XV::non_const_value_type;
  detail::rope_check(x.extent(3), "exa::rope_forward");
  detail::rope_apply("exa::rope::forward", x, pos_offset, +1, detail::RopeDirect<T>{index_t(x.extent(3)), theta},
                     exec);
}

// In-place backward (rotation by -angle) on the gradient dx[B,T,H,hd].
template <class XV>
void rope_backward(const XV& dx, double theta = 10000.0, index_t pos_offset = 0,
                   const exec_of<XV>& exec = exec_of<XV>{}) {
  static_assert(XV::rank == 4, "exa::rope_backward: dx must be rank 4 [B, T, H, hd]");
  using T = typename XV::non_const_value_type;
  detail::rope_check(dx.extent(3), "exa::rope_backward");
  detail::rope_apply("exa::rope::backward", dx, pos_offset, -1, detail::RopeDirect<T>{index_t(dx.extent(3)), theta},
                     exec);
}

namespace detail {
template <class XV, class T, class D>
void rope_table_check(const XV& x, const RopeTable<T, D>& tab, index_t pos_offset, const char* what) {
  rope_check(x.extent(3), what);
  EXA_REQUIRE(index_t(x.extent(3)) == tab.head_dim, "{}: head dim {} but the RoPE table was built for {}", what,
              x.extent(3), tab.head_dim);
  EXA_REQUIRE(pos_offset >= 0 && pos_offset + index_t(x.extent(1)) <= tab.max_pos(),
              "{}: positions {}..{} exceed the RoPE table's {} positions", what, pos_offset,
              pos_offset + index_t(x.extent(1)) - 1, tab.max_pos());
}
}  // namespace detail

// Same, with angles from a precomputed table.
template <class XV, class T, class D>
void rope_forward(const XV& x, const RopeTable<T, D>& tab, index_t pos_offset = 0,
                  const exec_of<XV>& exec = exec_of<XV>{}, RopeDocuments docs = {}) {
  static_assert(XV::rank == 4, "exa::rope_forward: x must be rank 4 [B, T, H, hd]");
  detail::rope_table_check(x, tab, pos_offset, "exa::rope_forward");
  using TV = Kokkos::View<T**, Kokkos::LayoutRight, D>;
  detail::rope_apply("exa::rope::forward", x, pos_offset, +1, detail::RopeLookup<TV>{tab.cos, tab.sin}, exec, docs);
}

template <class XV, class T, class D>
void rope_backward(const XV& dx, const RopeTable<T, D>& tab, index_t pos_offset = 0,
                   const exec_of<XV>& exec = exec_of<XV>{}, RopeDocuments docs = {}) {
  static_assert(XV::rank == 4, "exa::rope_backward: dx must be rank 4 [B, T, H, hd]");
  detail::rope_table_check(dx, tab, pos_offset, "exa::rope_backward");
  using TV = Kokkos::View<T**, Kokkos::LayoutRight, D>;
  detail::rope_apply("exa::rope::backward", dx, pos_offset, -1, detail::RopeLookup<TV>{tab.cos, tab.sin}, exec,
                     docs);
}

// Unmanaged [B, T, H, hd] view of a contiguous row-major [B*T, H*hd] tensor.
template <class V2>
Kokkos::View<typename V2::value_type****, Kokkos::LayoutRight, typename V2::device_type,
             Kokkos::MemoryTraits<Kokkos::Unmanaged>>
view_as_bthd(const V2& x, index_t B, index_t T, index_t H, index_t hd) {
  static_assert(V2::rank == 2, "exa::view_as_bthd: x must be rank 2 [B*T, H*hd]");
  static_assert(std::is_same<typename V2::array_layout, Kokkos::LayoutRight>::value,
                "exa::view_as_bthd: x must be LayoutRight");
  EXA_REQUIRE(index_t(x.extent(0)) == B * T && index_t(x.extent(1)) == H * hd && x.span_is_contiguous(),
              "exa::view_as_bthd: a contiguous {}x{} tensor cannot be viewed as [{}, {}, {}, {}]", x.extent(0),
              x.extent(1), B, T, H, hd);
  using R = Kokkos::View<typename V2::value_type****, Kokkos::LayoutRight, typename V2::device_type,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return R(x.data(), size_t(B), size_t(T), size_t(H), size_t(hd));
}

}  // namespace exa::kernels
