#include <gtest/gtest.h>

#include <cmath>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/rmsnorm.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {
template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;

// Host reference y = x * rsqrt(mean(x^2) + eps) * w, in double.
template <class X, class W>
Kokkos::View<double**, Kokkos::HostSpace> ref_rmsnorm(const X& x, const W& w, double eps) {
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
  Kokkos::View<double**, Kokkos::HostSpace> y("y", x.extent(0), x.extent(1));
  for (std::size_t n = 0; n < x.extent(0); ++n) {
    double ss = 0;
    for (std::size_t j = 0; j < x.extent(1); ++j) ss += double(hx(n, j)) * double(hx(n, j));
    const double r = 1.0 / std::sqrt(ss / double(x.extent(1)) + eps);
    for (std::size_t j = 0; j < x.extent(1); ++j) y(n, j) = double(hx(n, j)) * r * double(hw(j));
  }
  return y;
}
}  // namespace

TEST(RMSNorm, ForwardMatchesReference) {
  const index_t N = 6, d = 40;
  V2<double> x("x", N, d), y("y", N, d);
  V1<double> w("w", d), rstd("rstd", N);
  fill_uniform(x, 1, -2.0, 2.0);
  fill_uniform(w, 2, 0.5, 1.5);
  ek::rmsnorm_forward(x, w, y, rstd, 1e-5);
  EXPECT_LT(max_rel_diff(y, ref_rmsnorm(x, w, 1e-5)), 1e-14);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), rstd);
  for (index_t n = 0; n < N; ++n) {
    double ss = 0;
    for (index_t j = 0; j < d; ++j) ss += hx(n, j) * hx(n, j);
    EXPECT_NEAR(hr(n), 1.0 / std::sqrt(ss / d + 1e-5), 1e-14);
  }
}

// d = 40 spans a full and a partial host column block (32) in the dw sum.
TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  const index_t N = 7, d = 40;
  const double eps = 1e-5;
  V2<double> x("x", N, d), y("y", N, d), r("r", N, d), dx("dx", N, d);
  V1<double> w("w", d), rstd("rstd", N), dw("dw", d);
  fill_uniform(x, 3, -2.0, 2.0);
  fill_uniform(w, 4, 0.5, 1.5);
  fill_uniform(r, 5);
  fill_uniform(dw, 6);  // garbage: overwritten when not accumulating
  ek::rmsnorm_forward(x, w, y, rstd, eps);
  ek::rmsnorm_backward(x, w, rstd, r, dx, dw, /*accumulate_dw=*/false);
  auto loss = [&] {
    V1<double> rs("rs", N);
    ek::rmsnorm_forward(x, w, y, rs, eps);
    return dot(y, r);
  };
  expect_grad_matches_fd("rmsnorm/dx", x, dx, loss);
  expect_grad_matches_fd("rmsnorm/dw", w, dw, loss);
}

TEST(RMSNorm, BackwardAccumulatesAndRunsInPlace) {
  const index_t N = 5, d = 12;
  V2<double> x("x", N, d), y("y", N, d), dy("dy", N, d), dx("dx", N, d);
  V1<double> w("w", d), rstd("rstd", N), dw("dw", d);
  fill_uniform(x, 7, -2.0, 2.0);
  fill_uniform(w, 8);
  fill_uniform(dy, 9);
  ek::rmsnorm_forward(x, w, y, rstd);
  ek::rmsnorm_backward(x, w, rstd, dy, dx, dw, false);
  V2<double> dx1("dx1", N, d);
  V1<double> dw1("dw1", d);
  Kokkos::deep_copy(dx1, dx);
  Kokkos::deep_copy(dw1, dw);
  // accumulate: both gradients double
  ek::rmsnorm_backward(x, w, rstd, dy, dx, dw, true, true);
  auto h_dx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dx);
  auto h_dx1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dx1);
  auto h_dw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw);
  auto h_dw1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw1);
  for (index_t j = 0; j < d; ++j) EXPECT_NEAR(h_dw(j), 2 * h_dw1(j), 1e-14);
  for (index_t n = 0; n < N; ++n)
    for (index_t j = 0; j < d; ++j) EXPECT_NEAR(h_dx(n, j), 2 * h_dx1(n, j), 1e-14);
  // in place: dx written over dy
  V1<double> dw2("dw2", d);
  ek::rmsnorm_backward(x, w, rstd, dy, dy, dw2, false);
  EXPECT_EQ(max_rel_diff(dy, dx1), 0.0);
  EXPECT_EQ(max_rel_diff(dw2, dw1), 0.0);
}

TEST(RMSNorm, Fp32MatchesDoubleReference) {
  const index_t N = 9, d = 64;
  V2<float> x("x", N, d), y("y", N, d), dy("dy", N, d), dx("dx", N, d);
  V1<float> w("w", d), rstd("rstd", N), dw("dw", d);
  fill_uniform(x, 10, -3.0, 3.0);
  fill_uniform(w, 11, 0.5, 1.5);
  fill_uniform(dy, 12);
  ek::rmsnorm_forward(x, w, y, rstd);
  EXPECT_LT(max_rel_diff(y, ref_rmsnorm(x, w, 1e-5)), 2e-6);
  // backward against the double kernel on the same (rounded) inputs
  V2<double> xd("xd", N, d), dyd("dyd", N, d), dxd("dxd", N, d), yd("yd", N, d);
  V1<double> wd("wd", d), rd("rd", N), dwd("dwd", d);
  auto cast = [](const auto& src, const auto& dst) {
    auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), src);
    auto hd = Kokkos::create_mirror_view(dst);
    for (std::size_t i = 0; i < hs.span(); ++i) hd.data()[i] = double(hs.data()[i]);
    Kokkos::deep_copy(dst, hd);
  };
  cast(x, xd);
  cast(w, wd);
  cast(dy, dyd);
  ek::rmsnorm_forward(xd, wd, yd, rd);
  ek::rmsnorm_backward(xd, wd, rd, dyd, dxd, dwd, false);
  ek::rmsnorm_backward(x, w, rstd, dy, dx, dw, false);
  EXPECT_LT(max_rel_diff(dx, dxd), 2e-6);
  EXPECT_LT(max_rel_diff(dw, dwd), 2e-6);
}
