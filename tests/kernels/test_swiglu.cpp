#include <gtest/gtest.h>

#include <cmath>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/swiglu.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;

template <class A, class B>
Kokkos::View<double**, Kokkos::HostSpace> ref_swiglu(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  Kokkos::View<double**, Kokkos::HostSpace> h("h", a.extent(0), a.extent(1));
  for (std::size_t i = 0; i < a.extent(0); ++i)
    for (std::size_t j = 0; j < a.extent(1); ++j) {
      const double x = ha(i, j);
      h(i, j) = x / (1.0 + std::exp(-x)) * double(hb(i, j));
    }
  return h;
}
}  // namespace

TEST(SwiGLU, ForwardMatchesReference) {
  V2<double> a("a", 5, 9), b("b", 5, 9), h("h", 5, 9);
  fill_uniform(a, 1, -6.0, 6.0);
  fill_uniform(b, 2);
  ek::swiglu_forward(a, b, h);
  EXPECT_LT(max_rel_diff(h, ref_swiglu(a, b)), 1e-15);
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  const index_t N = 4, F = 7;
  V2<double> a("a", N, F), b("b", N, F), h("h", N, F), r("r", N, F), da("da", N, F), db("db", N, F);
  fill_uniform(a, 3, -5.0, 5.0);
  fill_uniform(b, 4, -2.0, 2.0);
  fill_uniform(r, 5);
  ek::swiglu_backward(a, b, r, da, db);
  auto loss = [&] {
    ek::swiglu_forward(a, b, h);
    return dot(h, r);
  };
  expect_grad_matches_fd("swiglu/da", a, da, loss);
  expect_grad_matches_fd("swiglu/db", b, db, loss);
}

TEST(SwiGLU, InPlaceAndStridedColumnHalves) {
  // a and b as the two column halves of one fused [N, 2F] projection output.
  const index_t N = 3, F = 4;
  V2<double> ab("ab", N, 2 * F), h("h", N, F), h_ref("h_ref", N, F), dh("dh", N, F);
  fill_uniform(ab, 6, -4.0, 4.0);
  fill_uniform(dh, 7);
  auto a = Kokkos::subview(ab, Kokkos::ALL, Kokkos::make_pair(index_t(0), F));
  auto b = Kokkos::subview(ab, Kokkos::ALL, Kokkos::make_pair(F, 2 * F));
  ek::swiglu_forward(a, b, h);
  EXPECT_LT(max_rel_diff(h, ref_swiglu(a, b)), 1e-15);
  // reference gradients into separate buffers, then in place over a and b
  V2<double> da("da", N, F), db("db", N, F), ac("ac", N, F), bc("bc", N, F);
  Kokkos::deep_copy(ac, a);
  Kokkos::deep_copy(bc, b);
  ek::swiglu_backward(ac, bc, dh, da, db);
  ek::swiglu_backward(a, b, dh, a, b);
  V2<double> a2("a2", N, F), b2("b2", N, F);
  Kokkos::deep_copy(a2, a);
  Kokkos::deep_copy(b2, b);
  EXPECT_EQ(max_rel_diff(a2, da), 0.0);
  EXPECT_EQ(max_rel_diff(b2, db), 0.0);
}

TEST(SwiGLU, Fp32MatchesReferenceAndSaturates) {
  V2<float> a("a", 3, 8), b("b", 3, 8), h("h", 3, 8), da("da", 3, 8), db("db", 3, 8);
  fill_uniform(a, 8, -8.0, 8.0);
  fill_uniform(b, 9);
  ek::swiglu_forward(a, b, h);
  EXPECT_LT(max_rel_diff(h, ref_swiglu(a, b)), 1e-6);
  // extreme inputs stay finite: silu(-100) = -0, silu(100) = 100
  Kokkos::deep_copy(a, -100.0f);
  Kokkos::deep_copy(b, 1.0f);
  Kokkos::deep_copy(h, 1.0f);
  ek::swiglu_backward(a, b, h, da, db);
  ek::swiglu_forward(a, b, h);
  EXPECT_EQ(dot(h, h), 0.0);
  EXPECT_EQ(dot(da, da), 0.0);
  Kokkos::deep_copy(a, 100.0f);
  ek::swiglu_forward(a, b, h);
  ek::swiglu_backward(a, b, b, da, db);
  EXPECT_NEAR(dot(h, h), 24 * 1e4, 1e-2);
  EXPECT_NEAR(dot(da, da), 24.0, 1e-4);
}
