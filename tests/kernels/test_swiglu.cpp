#include <gtest/gtest.h>

#include <cmath>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/convert.hpp"
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

namespace {
template <class V>
std::vector<float> floats_of(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<float> f(h.span());
  for (std::size_t i = 0; i < h.span(); ++i) f[i] = float(h.data()[i]);
  return f;
}
}  // namespace

// bf16 operands (the routed experts' ea, eb, eh and the gradients' dea,
// deb of the bf16 storage, docs/architecture.md "Mixed precision"): the
// arithmetic is fp32 on the widened values, and a bf16 result is that fp32
// result rounded once, so they equal the fp32 kernel on the widened inputs,
// rounded, bit for bit. Against the unrounded fp32 inputs: rounding a
// (relative 2^-9) moves silu(a) by |a silu'(a) / silu(a)| <= 1 + |a| <= 7
// times that for |a| <= 6, rounding b and the result add 2^-9 each, so
// 9 * 2^-9 < 2^-5 relative.
TEST(SwiGLU, Bf16OperandsAreTheFp32KernelOnTheirValues) {
  using B = exa::bf16;
  const index_t N = 6, F = 17;
  V2<float> a("a", N, F), b("b", N, F), g("g", N, F);
  fill_uniform(a, 11, -6.0, 6.0);
  fill_uniform(b, 12);
  fill_uniform(g, 13);
  V2<B> a16("a16", N, F), b16("b16", N, F), h16("h16", N, F), da16("da16", N, F), db16("db16", N, F);
  ek::fp32_to_bf16(a, a16);
  ek::fp32_to_bf16(b, b16);
  V2<float> aw("aw", N, F), bw("bw", N, F), h("h", N, F), da("da", N, F), db("db", N, F);
  ek::bf16_to_fp32(a16, aw);
  ek::bf16_to_fp32(b16, bw);
  ek::swiglu_forward(a16, b16, h16);
  ek::swiglu_forward(aw, bw, h);
  V2<B> hr("hr", N, F);
  ek::fp32_to_bf16(h, hr);
  EXPECT_EQ(floats_of(h16), floats_of(hr)) << "bf16 forward is not the fp32 one rounded once";
  // bf16 inputs, an fp32 incoming gradient, fp32 and bf16 outputs.
  V2<float> da32("da32", N, F), db32("db32", N, F);
  ek::swiglu_backward(a16, b16, g, da32, db32);
  ek::swiglu_backward(aw, bw, g, da, db);
  EXPECT_EQ(floats_of(da32), floats_of(da));
  EXPECT_EQ(floats_of(db32), floats_of(db));
  ek::swiglu_backward(a16, b16, g, da16, db16);
  V2<B> dar("dar", N, F), dbr("dbr", N, F);
  ek::fp32_to_bf16(da, dar);
  ek::fp32_to_bf16(db, dbr);
  EXPECT_EQ(floats_of(da16), floats_of(dar));
  EXPECT_EQ(floats_of(db16), floats_of(dbr));
  // Against the unrounded inputs: bf16's precision, not more.
  V2<float> h32("h32", N, F);
  ek::swiglu_forward(a, b, h32);
  const auto x = floats_of(h16), y = floats_of(h32);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(double(x[i]) - y[i]) / std::max(1e-3, std::fabs(double(y[i]))));
  EXPECT_LE(worst, std::ldexp(1.0, -5));
  EXPECT_GT(worst, std::ldexp(1.0, -12)) << "no bf16 rounding seen";
}
