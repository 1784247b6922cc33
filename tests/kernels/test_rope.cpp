#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/rope.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight, TestDevice>;

// Host reference of the half-split rotation, all arithmetic in double.
template <class X>
Kokkos::View<double****, Kokkos::HostSpace> ref_rope(const X& x, double theta, index_t off, int sign) {
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  Kokkos::View<double****, Kokkos::HostSpace> y("y", x.extent(0), x.extent(1), x.extent(2), x.extent(3));
  const index_t hd = x.extent(3), half = hd / 2;
  for (std::size_t b = 0; b < x.extent(0); ++b)
    for (std::size_t t = 0; t < x.extent(1); ++t)
      for (std::size_t h = 0; h < x.extent(2); ++h)
        for (index_t i = 0; i < half; ++i) {
          const double a = double(t + off) * std::pow(theta, -2.0 * double(i) / double(hd));
          const double c = std::cos(a), s = sign * std::sin(a);
          const double x1 = hx(b, t, h, i), x2 = hx(b, t, h, i + half);
          y(b, t, h, i) = x1 * c - x2 * s;
          y(b, t, h, i + half) = x2 * c + x1 * s;
        }
  return y;
}
}  // namespace

TEST(RoPE, ForwardMatchesReference) {
  V4<double> x("x", 2, 5, 3, 8);
  fill_uniform(x, 1);
  const auto expect = ref_rope(x, 10000.0, 3, +1);
  ek::rope_forward(x, 10000.0, 3);
  EXPECT_LT(max_rel_diff(x, expect), 1e-14);
}

TEST(RoPE, BackwardMatchesFiniteDifferences) {
  const index_t B = 2, T = 4, H = 2, hd = 6, off = 5;
  V4<double> x("x", B, T, H, hd), y("y", B, T, H, hd), r("r", B, T, H, hd), dx("dx", B, T, H, hd);
  fill_uniform(x, 2);
  fill_uniform(r, 3);
  Kokkos::deep_copy(dx, r);
  ek::rope_backward(dx, 500000.0, off);
  expect_grad_matches_fd("rope/dx", x, dx, [&] {
    Kokkos::deep_copy(y, x);
    ek::rope_forward(y, 500000.0, off);
    return dot(y, r);
  });
}

TEST(RoPE, BackwardInvertsForward) {
  V4<double> x("x", 1, 9, 2, 16), x0("x0", 1, 9, 2, 16);
  fill_uniform(x, 4);
  Kokkos::deep_copy(x0, x);
  ek::rope_forward(x, 10000.0, 100);
  ek::rope_backward(x, 10000.0, 100);
  EXPECT_LT(max_rel_diff(x, x0), 1e-15);
}

TEST(RoPE, TableGivesTheSameBitsAsDirect) {
  const index_t B = 2, T = 6, H = 3, hd = 10, off = 7;
  V4<float> a("a", B, T, H, hd), b("b", B, T, H, hd);
  fill_uniform(a, 5);
  Kokkos::deep_copy(b, a);
  const auto tab = ek::make_rope_table<float, TestDevice>(off + T, hd, 10000.0);
  ek::rope_forward(a, 10000.0, off);
  ek::rope_forward(b, tab, off);
  EXPECT_EQ(max_rel_diff(a, b), 0.0);
  ek::rope_backward(a, 10000.0, off);
  ek::rope_backward(b, tab, off);
  EXPECT_EQ(max_rel_diff(a, b), 0.0);
  EXPECT_THROW(ek::rope_forward(b, tab, off + 1), exa::Error);  // past the table's positions
}

TEST(RoPE, ViewAsBthdAliasesProjectionOutput) {
  const index_t B = 2, T = 3, H = 2, hd = 4;
  V2<double> q("q", B * T, H * hd);
  fill_uniform(q, 6);
  auto q4 = ek::view_as_bthd(q, B, T, H, hd);
  EXPECT_EQ(q4.data(), q.data());
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hq4 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q4);
  EXPECT_EQ(hq4(1, 2, 1, 3), hq(1 * T + 2, 1 * hd + 3));
  EXPECT_THROW(ek::view_as_bthd(q, B, T, H, hd + 2), exa::Error);
}

// inv_freq = 1 / theta^(arange(0, hd, 2) / hd) exactly as PyTorch 1.13 (CPU, fp32)
// computes it for hd = 64, theta = 1e4 (bit patterns printed by torch).
TEST(RoPE, Fp32InvFreqMatchesPyTorchBits) {
  const std::uint32_t torch_bits[32] = {
      0x3f800000, 0x3f3ff911, 0x3f0ff59a, 0x3ed7e89b, 0x3ea1e89b, 0x3e72d423, 0x3e361887, 0x3e088d77,
      0x3dcccccd, 0x3d99940d, 0x3d6655c2, 0x3d2cba15, 0x3d0186e3, 0x3cc2434f, 0x3c91ad39, 0x3c5a7bf2,
      0x3c23d70a, 0x3bf5b9b0, 0x3bb8449c, 0x3b8a2e77, 0x3b4f3e38, 0x3b1b690d, 0x3ae91528, 0x3aaec98e,
      0x3a83126f, 0x3a44948c, 0x3a136a16, 0x39dd1725, 0x39a5cb60, 0x3978a815, 0x393a7753, 0x390bd472};
  for (index_t i = 0; i < 32; ++i) {
    const float f = ek::detail::rope_inv_freq<float>(i, 64, 10000.0);
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    EXPECT_EQ(u, torch_bits[i]) << "i = " << i;
  }
}

// cos/sin of PyTorch's fp32 angles (pos * inv_freq, hd = 128), from
// torch.outer(pos, inv_freq).cos()/.sin(): long positions only agree to
// 1e-6 if the fp32 angle is rounded exactly as PyTorch rounds it.
TEST(RoPE, Fp32AnglesMatchPyTorchAtLongPositions) {
  struct Ref {
    double theta;
    index_t pos, i;
    double c, s;
  };
  const Ref refs[] = {
      {10000, 7, 0, 0.753902256, 0.656986594},      {10000, 7, 1, 0.975583315, -0.219629705},
      {10000, 7, 5, -0.964519262, -0.264012605},    {10000, 7, 17, 0.821833253, 0.569728136},
      {10000, 7, 40, 0.999755025, 0.0221341364},    {10000, 7, 63, 0.999999702, 0.000808347249},
      {10000, 1000, 0, 0.562379062, 0.826879561},   {10000, 1000, 1, 0.439982712, -0.89800626},
      {10000, 1000, 5, -0.999786437, -0.0206665192}, {10000, 1000, 17, 0.201246157, -0.979540706},
      {10000, 1000, 40, -0.999786079, -0.0206838083}, {10000, 1000, 63, 0.993339777, 0.115221709},
      {10000, 4095, 0, -0.0659759939, -0.997821212}, {10000, 4095, 1, -0.742445707, 0.669906199},
      {10000, 4095, 5, -0.711437345, 0.70274955},   {10000, 4095, 17, -0.925817311, 0.377971381},
      {10000, 4095, 40, 0.927488983, 0.373850524},  {10000, 4095, 63, 0.890258849, 0.455454975},
      {500000, 7, 1, 0.835988462, -0.548747063},    {500000, 7, 5, -0.807743967, 0.589533508},
      {500000, 1000, 1, -0.585993946, -0.81031543}, {500000, 1000, 5, 0.831684291, 0.555248797},
      {500000, 1000, 17, 0.709924698, -0.704277575}, {500000, 1000, 40, 0.96262908, 0.2708233},
      {500000, 4095, 1, 0.870796502, -0.491643608}, {500000, 4095, 5, 0.300940365, -0.953642964},
      {500000, 4095, 17, 0.976903379, -0.21368143}, {500000, 4095, 40, 0.432938486, 0.901423454},
      {500000, 4095, 63, 0.999949455, 0.0100536318},
  };
  for (double theta : {10000.0, 500000.0}) {
    const auto tab = ek::make_rope_table<float, TestDevice>(4096, 128, theta);
    auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tab.cos);
    auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tab.sin);
    double worst = 0;
    for (const Ref& r : refs) {
      if (r.theta != theta) continue;
      const double ec = std::fabs(hc(r.pos, r.i) - r.c), es = std::fabs(hs(r.pos, r.i) - r.s);
      worst = std::max(worst, std::max(ec, es));
      EXPECT_LT(ec, 1e-6) << "theta " << theta << " pos " << r.pos << " i " << r.i;
      EXPECT_LT(es, 1e-6) << "theta " << theta << " pos " << r.pos << " i " << r.i;
    }
    std::printf("[rope %s] theta %g: worst |cos,sin - torch| = %.3e (tol 1e-6)\n", EXAMOE_TEST_BACKEND_NAME, theta,
                worst);
  }
}

// The fp32 kernel against a host model of PyTorch's fp32 arithmetic
// (q * cos + rotate_half(q) * sin, each product and sum rounded to fp32).
TEST(RoPE, Fp32ForwardMatchesPyTorchArithmetic) {
  const index_t B = 1, T = 64, H = 2, hd = 32, off = 2000;
  V4<float> x("x", B, T, H, hd);
  fill_uniform(x, 7, -3.0, 3.0);
  auto hx = Kokkos::create_mirror(x);
  Kokkos::deep_copy(hx, x);
  ek::rope_forward(x, 10000.0, off);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  double worst = 0;
  for (index_t t = 0; t < T; ++t)
    for (index_t h = 0; h < H; ++h)
      for (index_t i = 0; i < hd / 2; ++i) {
        const float e = float(2 * i) / float(hd);
        const float inv = 1.0f / float(std::pow(double(10000.0f), double(e)));
        const float a = float(t + off) * inv;
        const float c = std::cos(a), s = std::sin(a);
        const float x1 = hx(0, t, h, i), x2 = hx(0, t, h, i + hd / 2);
        const float y1 = x1 * c + (-x2) * s, y2 = x2 * c + x1 * s;
        worst = std::max(worst, std::fabs(double(hy(0, t, h, i)) - y1) / std::max(1.0, std::fabs(double(y1))));
        worst = std::max(worst, std::fabs(double(hy(0, t, h, i + hd / 2)) - y2) / std::max(1.0, std::fabs(double(y2))));
      }
  std::printf("[rope %s] fp32 forward vs PyTorch-order fp32 model: worst rel err %.3e (tol 1e-6)\n",
              EXAMOE_TEST_BACKEND_NAME, worst);
  EXPECT_LT(worst, 1e-6);
}

TEST(RoPE, OddHeadDimThrows) {
  V4<double> x("x", 1, 2, 1, 5);
  EXPECT_THROW(ek::rope_forward(x), exa::Error);
}

// Packed sequences: each document's rows are rotated as if the document
// started the sequence (positions restart at its first row), here for a
// chunk at an offset as context parallelism places one.
TEST(RoPE, DocumentsRestartPositions) {
  const index_t B = 2, T = 9, H = 2, hd = 8, off = 3, whole = off + T;
  const auto tab = ek::make_rope_table<double, TestDevice>(whole, hd);
  V4<double> x("x", B, T, H, hd), y("y", B, T, H, hd);
  fill_uniform(x, 7);
  Kokkos::deep_copy(y, x);
  // Sequence 0: documents [0,5) [5,12); sequence 1: [0,2) [2,8) [8,12).
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, TestDevice> start("start", B, whole);
  auto hs = Kokkos::create_mirror_view(start);
  for (index_t p = 0; p < whole; ++p) {
    hs(0, p) = p < 5 ? 0 : 5;
    hs(1, p) = p < 2 ? 0 : (p < 8 ? 2 : 8);
  }
  Kokkos::deep_copy(start, hs);
  ek::rope_forward(y, tab, off, {}, ek::RopeDocuments{start.data(), whole});
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  double worst = 0;
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t) {
      // Row t alone, rotated at its position within its document.
      auto row = Kokkos::subview(x, Kokkos::make_pair(b, b + 1), Kokkos::make_pair(t, t + 1), Kokkos::ALL, Kokkos::ALL);
      const auto ref = ref_rope(row, 10000.0, t + off - hs(b, t + off), +1);
      for (index_t h = 0; h < H; ++h)
        for (index_t i = 0; i < hd; ++i) worst = std::max(worst, std::fabs(ref(0, 0, h, i) - hy(b, t, h, i)));
    }
  EXPECT_LE(worst, 1e-12);
  // The backward with the same documents undoes it.
  ek::rope_backward(y, tab, off, {}, ek::RopeDocuments{start.data(), whole});
  EXPECT_LE(max_rel_diff(y, x), 1e-12);
}
