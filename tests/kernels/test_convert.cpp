// fp32 <-> bf16 View conversions (kernels/convert.hpp): element-wise equal
// to the scalar exa::to_bf16 / exa::to_float on every backend, round trip
// within 2^-8 relative, special values preserved, any rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/convert.hpp"

using namespace exa::test;
using exa::bf16;

namespace {
template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;

float f_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t u_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

TEST(Convert, MatchesScalarConversionOnSpecialValues) {
  const std::uint32_t pats[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                                0x3f807fffu, 0xbf808000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                0xff800001u, 0x7f7fffffu, 0x7f7f7fffu, 0x00000001u, 0x00010000u, 0x00018000u,
                                0x007fffffu, 0x807f7fffu, 0x3fff8000u, 0x7fffffffu};
  const std::size_t n = sizeof(pats) / sizeof(pats[0]);
  V1<float> x("x", n);
  V1<bf16> h("h", n);
  V1<float> y("y", n);
  auto hx = Kokkos::create_mirror_view(x);
  for (std::size_t i = 0; i < n; ++i) hx(i) = f_of(pats[i]);
  Kokkos::deep_copy(x, hx);
  exa::kernels::fp32_to_bf16(x, h);
  exa::kernels::bf16_to_fp32(h, y);
  auto hh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t want = exa::to_bf16(f_of(pats[i])).bits;
    EXPECT_EQ(hh(i).bits, want) << std::hex << "pattern 0x" << pats[i];
    EXPECT_EQ(u_of(hy(i)), std::uint32_t(hh(i).bits) << 16) << "bf16 -> fp32 must be exact";
  }
  // Spot checks of the rounding itself (the scalar is tested in core/test_bf16).
  EXPECT_EQ(hh(3).bits, 0x3f80u);  // tie, down to even
  EXPECT_EQ(hh(4).bits, 0x3f82u);  // tie, up to even
  EXPECT_EQ(hh(13).bits, 0x7f80u);  // FLT_MAX -> inf
  EXPECT_TRUE(std::isnan(hy(10)));
  EXPECT_TRUE(std::isnan(hy(11)));
  EXPECT_TRUE(std::signbit(hy(1)));
}

TEST(Convert, RoundTripWithinHalfUlpRank2) {
  V2<float> x("x", 67, 129);
  fill_uniform(x, 11, -100.0, 100.0);
  V2<bf16> h("h", 67, 129);
  V2<float> y("y", 67, 129);
  exa::kernels::fp32_to_bf16(x, h);
  exa::kernels::bf16_to_fp32(h, y);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  double worst = 0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < x.extent(0); ++i) {
    for (std::size_t j = 0; j < x.extent(1); ++j) {
      const double a = hx(i, j), b = hy(i, j);
      if (a != 0) worst = std::max(worst, std::fabs(a - b) / std::fabs(a));
      mismatches += hh(i, j).bits != exa::to_bf16(hx(i, j)).bits;
    }
  }
  std::printf("[convert %s] fp32->bf16->fp32 worst relative error %.4e (bound 2^-8 = %.4e)\n",
              EXAMOE_TEST_BACKEND_NAME, worst, std::ldexp(1.0, -8));
  EXPECT_EQ(mismatches, 0u);
  EXPECT_LE(worst, std::ldexp(1.0, -8));
  EXPECT_GT(worst, 0.0);  // bf16 really dropped bits
}

TEST(Convert, Rank3AndConstSource) {
  V3<float> x("x", 3, 5, 7);
  fill_uniform(x, 5, -1e-3, 1e-3);
  V3<bf16> h("h", 3, 5, 7);
  V3<float> y("y", 3, 5, 7);
  Kokkos::View<const float***, Kokkos::LayoutRight, TestDevice> cx = x;
  exa::kernels::fp32_to_bf16(cx, h);
  Kokkos::View<const bf16***, Kokkos::LayoutRight, TestDevice> ch = h;
  exa::kernels::bf16_to_fp32(ch, y);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 5; ++j)
      for (std::size_t k = 0; k < 7; ++k)
        EXPECT_EQ(u_of(hy(i, j, k)), u_of(exa::to_float(exa::to_bf16(hx(i, j, k)))));
}

TEST(Convert, BitExactRoundTripOfBf16Values) {
  // Every bf16 pattern: bf16 -> fp32 -> bf16 gives it back (NaNs stay NaN).
  const std::size_t n = 1u << 16;
  V1<bf16> h("h", n), h2("h2", n);
  V1<float> f("f", n);
  auto hh = Kokkos::create_mirror_view(h);
  for (std::size_t i = 0; i < n; ++i) hh(i) = bf16::from_bits(static_cast<std::uint16_t>(i));
  Kokkos::deep_copy(h, hh);
  exa::kernels::bf16_to_fp32(h, f);
  exa::kernels::fp32_to_bf16(f, h2);
  auto back = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), h2);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool nan = (i & 0x7f80u) == 0x7f80u && (i & 0x7fu) != 0;
    if (nan) {
      bad += !((back(i).bits & 0x7f80u) == 0x7f80u && (back(i).bits & 0x7fu) != 0);
    } else {
      bad += back(i).bits != i;
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(Convert, ShapeMismatchIsAnError) {
  V2<float> x("x", 4, 6);
  V2<bf16> h("h", 6, 4);
  EXPECT_THROW(exa::kernels::fp32_to_bf16(x, h), exa::Error);
  V1<float> a("a", 0);
  V1<bf16> b("b", 0);
  EXPECT_NO_THROW(exa::kernels::fp32_to_bf16(a, b));
}
