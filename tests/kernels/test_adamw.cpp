// Fused AdamW (kernels/adamw.hpp) against an independent host reference in
// long double written in the textbook bias-corrected form
//   m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t),
//   p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps),
// over several steps with a fresh gradient each step, in double and float.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/adamw.hpp"

using namespace exa::test;
using exa::kernels::AdamWHyper;

namespace {

template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;

struct Ref {
  std::vector<long double> p, m, v;
};

// One textbook AdamW step on the host (independent of the kernel's form).
void ref_step(Ref& r, const std::vector<long double>& grad, const AdamWHyper& h) {
  const long double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
  const long double bc1 = 1.0L - std::pow(b1, static_cast<long double>(h.step));
  // A frozen second moment (variance_frozen_at = N, step > N) keeps its
  // value and N's bias correction; one still 0 takes (1 - b2^N) g^2, whose
  // corrected value is g^2 (Adam's first step), and keeps that.
  const bool frozen = h.variance_frozen_at > 0 && h.step > h.variance_frozen_at;
  const long double bc2 = 1.0L - std::pow(b2, static_cast<long double>(frozen ? h.variance_frozen_at : h.step));
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    const long double g = grad[i] * static_cast<long double>(h.grad_scale);
    r.p[i] *= 1.0L - lr * wd;
    r.m[i] = b1 * r.m[i] + (1.0L - b1) * g;
    if (!frozen) r.v[i] = b2 * r.v[i] + (1.0L - b2) * g * g;
    else if (r.v[i] == 0) r.v[i] = bc2 * g * g;
    const long double mhat = r.m[i] / bc1, vhat = r.v[i] / bc2;
    r.p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

template <class V>
std::vector<long double> to_host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<long double> out(h.span());
  for (std::size_t i = 0; i < h.span(); ++i) out[i] = h.data()[i];
  return out;
}

// max |a - r| / max |r|   (normwise: m passes through zero, so elementwise
// relative errors of a correct float kernel are unbounded there).
double normwise_err(const std::vector<long double>& a, const std::vector<long double>& r) {
  long double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - r[i]));
    den = std::max(den, std::fabs(r[i]));
  }
  return static_cast<double>(den > 0 ? num / den : num);
}

template <class T>
void run_against_reference(const AdamWHyper& base, int steps, double tol, const char* what) {
  const std::size_t n = 1000;
  V1<T> p("p", n), g("g", n), m("m", n), v("v", n);
  fill_uniform(p, 1, -1.0, 1.0);
  Ref ref{to_host(p), std::vector<long double>(n, 0.0L), std::vector<long double>(n, 0.0L)};
  double worst_p = 0, worst_m = 0, worst_v = 0;
  for (int s = 1; s <= steps; ++s) {
    fill_uniform(g, 100 + s, -2.0, 2.0);
    // A few exact zeros and tiny gradients: the eps branch. Element 2's
    // first gradient comes at step 5, after a variance freeze at 3.
    auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    hg(0) = 0;
    hg(1) = T(1e-9);
    if (s < 5) hg(2) = 0;
    Kokkos::deep_copy(g, hg);
    AdamWHyper h = base;
    h.step = s;
    exa::kernels::adamw_step(p, g, m, v, h);
    ref_step(ref, to_host(g), h);
    worst_p = std::max(worst_p, normwise_err(to_host(p), ref.p));
    worst_m = std::max(worst_m, normwise_err(to_host(m), ref.m));
    worst_v = std::max(worst_v, normwise_err(to_host(v), ref.v));
  }
  std::printf("[adamw %s] %-28s %d steps: worst normwise err p %.3e m %.3e v %.3e, tol %.1e\n",
              EXAMOE_TEST_BACKEND_NAME, what, steps, worst_p, worst_m, worst_v, tol);
  EXPECT_LE(worst_p, tol);
  EXPECT_LE(worst_m, tol);
  EXPECT_LE(worst_v, tol);
}

AdamWHyper hyper(double lr, double wd, double gs = 1.0) {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = wd;
  h.grad_scale = gs;
  return h;
}

// A host copy that never aliases (create_mirror_view_and_copy returns the
// View itself when it is already in host memory).
template <class V>
auto host_copy(const V& v) {
  auto h = Kokkos::create_mirror(Kokkos::HostSpace(), v);
  Kokkos::deep_copy(h, v);
  return h;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST(AdamW, DoubleMatchesReferenceWithDecay) {
  run_against_reference<double>(hyper(0.05, 0.1), 8, 1e-13, "double wd=0.1");
}
TEST(AdamW, DoubleMatchesReferenceNoDecay) { run_against_reference<double>(hyper(0.05, 0.0), 8, 1e-13, "double wd=0"); }
TEST(AdamW, DoubleMatchesReferenceGradScale) {
  run_against_reference<double>(hyper(0.02, 0.01, 0.37), 8, 1e-13, "double wd=0.01 grad_scale=0.37");
}
TEST(AdamW, DoubleDefaultBetas) {
  AdamWHyper h;  // 0.9 / 0.999 / 1e-8 / wd 1e-2, lr 1e-3
  run_against_reference<double>(h, 8, 1e-13, "double defaults");
}
TEST(AdamW, FloatMatchesReferenceWithDecay) { run_against_reference<float>(hyper(0.05, 0.1), 8, 2e-6, "float wd=0.1"); }
TEST(AdamW, FloatMatchesReferenceNoDecay) { run_against_reference<float>(hyper(0.05, 0.0), 8, 2e-6, "float wd=0"); }
TEST(AdamW, FloatMatchesReferenceGradScale) {
  run_against_reference<float>(hyper(0.02, 0.01, 1.0 / 1024), 8, 2e-6, "float wd=0.01 grad_scale=2^-10");
}

TEST(AdamW, FrozenVarianceMatchesReference) {
  AdamWHyper h = hyper(0.05, 0.1);
  h.variance_frozen_at = 3;
  run_against_reference<double>(h, 8, 1e-13, "double v frozen at 3");
  run_against_reference<float>(h, 8, 2e-6, "float v frozen at 3");
}

TEST(AdamW, FrozenVarianceMovesLateGradientsAsFar) {
  // Error feedback delays a gradient; it does not lose it. With the second
  // moment frozen the update is linear in the gradient, so a gradient x at
  // step 310 and y at step 340 move a weight as far, once the momentum has
  // decayed, as x + y at step 340 alone (the momentum's bias correction,
  // 1 - 0.9^310, differs from 1 by 6e-15). With v still updating they do
  // not: v moves with what arrives (and decays between the two steps).
  const std::size_t n = 3;
  auto travel = [&](std::int64_t frozen_at, bool late) {
    V1<double> p("p", n), g("g", n), m("m", n), v("v", n);
    auto hg = Kokkos::create_mirror_view(g);
    for (std::int64_t s = 1; s <= 800; ++s) {
      for (std::size_t i = 0; i < n; ++i) {
        const double x = 0.5 + double(i), y = -0.2 + 0.3 * double(i);
        double gi = s <= 300 ? std::sin(double(s + 7 * i)) : 0.0;  // a history for v
        if (s == 310) gi = late ? 0.0 : x;
        if (s == 340) gi = late ? x + y : y;
        hg(i) = gi;
      }
      Kokkos::deep_copy(g, hg);
      AdamWHyper h = hyper(1e-3, 0.0);
      h.step = s;
      h.variance_frozen_at = frozen_at;
      exa::kernels::adamw_step(p, g, m, v, h);
    }
    return to_host(p);
  };
  const auto on_time = travel(300, false), delayed = travel(300, true);
  const auto live_on_time = travel(0, false), live_delayed = travel(0, true);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(double(delayed[i]), double(on_time[i]), 1e-12) << i;
    EXPECT_GT(std::fabs(double(live_delayed[i] - live_on_time[i])), 1e-5) << i;
  }
}

TEST(AdamW, FirstStepMovesEachWeightByAboutLr) {
  // m_hat = g, v_hat = g^2 at step 1: the update is lr * sign(g) (for |g| >> eps).
  const std::size_t n = 257;
  V1<double> p("p", n), g("g", n), m("m", n), v("v", n);
  fill_uniform(p, 3);
  fill_uniform(g, 4, 0.5, 1.5);
  auto p0 = to_host(p);
  exa::kernels::adamw_step(p, g, m, v, hyper(0.01, 0.0));
  auto p1 = to_host(p);
  for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(static_cast<double>(p0[i] - p1[i]), 0.01, 1e-9) << i;
}

TEST(AdamW, WeightDecayIsDecoupled) {
  // Same gradient with and without decay: identical moments; parameters
  // differ by exactly the decay term lr * wd * p (to rounding).
  const std::size_t n = 300;
  V1<float> pa("pa", n), pb("pb", n), g("g", n), ma("ma", n), va("va", n), mb("mb", n), vb("vb", n);
  fill_uniform(pa, 7);
  Kokkos::deep_copy(pb, pa);
  const auto p0 = to_host(pa);
  fill_uniform(g, 8);
  exa::kernels::adamw_step(pa, g, ma, va, hyper(0.1, 0.0));
  exa::kernels::adamw_step(pb, g, mb, vb, hyper(0.1, 0.5));
  auto hma = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ma);
  auto hmb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mb);
  auto hva = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), va);
  auto hvb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), vb);
  const auto a = to_host(pa), b = to_host(pb);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits(hma(i)), bits(hmb(i)));
    ASSERT_EQ(bits(hva(i)), bits(hvb(i)));
    EXPECT_NEAR(static_cast<double>(a[i] - b[i]), static_cast<double>(0.1L * 0.5L * p0[i]), 1e-6) << i;
  }
}

TEST(AdamW, ZeroGradientOnlyDecays) {
  // m = v = 0 and g = 0: the Adam term is 0 / eps = 0, so p *= (1 - lr wd).
  const std::size_t n = 64;
  V1<float> p("p", n), g("g", n), m("m", n), v("v", n);
  fill_uniform(p, 9);
  auto h0 = host_copy(p);
  exa::kernels::adamw_step(p, g, m, v, hyper(0.1, 0.25));
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p);
  const float decay = static_cast<float>(1.0 - 0.1 * 0.25);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(bits(h1(i)), bits(h0(i) * decay)) << i;
}

TEST(AdamW, GradScaleEqualsPrescaledGradient) {
  // grad_scale = s on g is bit-identical to grad_scale = 1 on float(g * s).
  const std::size_t n = 500;
  const float s = 0.37f;
  V1<float> pa("pa", n), pb("pb", n), ga("ga", n), gb("gb", n), ma("ma", n), va("va", n), mb("mb", n),
      vb("vb", n);
  fill_uniform(pa, 10);
  Kokkos::deep_copy(pb, pa);
  for (int step = 1; step <= 3; ++step) {
    fill_uniform(ga, 20 + step, -3.0, 3.0);
    auto hg = host_copy(ga);
    for (std::size_t i = 0; i < n; ++i) hg(i) = hg(i) * s;
    Kokkos::deep_copy(gb, hg);
    AdamWHyper a = hyper(0.01, 0.1, s), b = hyper(0.01, 0.1, 1.0);
    a.step = b.step = step;
    exa::kernels::adamw_step(pa, ga, ma, va, a);
    exa::kernels::adamw_step(pb, gb, mb, vb, b);
  }
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pa);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pb);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(ha(i)), bits(hb(i))) << i;
}

TEST(AdamW, AnyRankAndConstGradient) {
  // A [7, 11] tensor updates exactly like its flat [77] copy.
  V2<float> p2("p2", 7, 11), g2("g2", 7, 11), m2("m2", 7, 11), v2("v2", 7, 11);
  V1<float> p1("p1", 77), g1("g1", 77), m1("m1", 77), v1("v1", 77);
  fill_uniform(p2, 30);
  fill_uniform(g2, 31);
  Kokkos::deep_copy(p1, Kokkos::View<float*, Kokkos::LayoutRight, TestDevice>(p2.data(), 77));
  Kokkos::deep_copy(g1, Kokkos::View<float*, Kokkos::LayoutRight, TestDevice>(g2.data(), 77));
  Kokkos::View<const float**, Kokkos::LayoutRight, TestDevice> cg2 = g2;
  for (int s = 1; s <= 3; ++s) {
    AdamWHyper h = hyper(0.03, 0.1);
    h.step = s;
    exa::kernels::adamw_step(p2, cg2, m2, v2, h);
    exa::kernels::adamw_step(p1, g1, m1, v1, h);
  }
  const auto a = to_host(p2), b = to_host(p1);
  for (std::size_t i = 0; i < 77; ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(AdamW, RejectsBadInput) {
  V1<float> p("p", 8), g("g", 8), m("m", 8), v("v", 8), short_g("short", 7);
  AdamWHyper h = hyper(0.01, 0.0);
  h.step = 0;
  EXPECT_THROW(exa::kernels::adamw_step(p, g, m, v, h), exa::Error);
  h.step = 1;
  h.beta2 = 1.0;
  EXPECT_THROW(exa::kernels::adamw_step(p, g, m, v, h), exa::Error);
  h.beta2 = 0.999;
  h.variance_frozen_at = -1;
  EXPECT_THROW(exa::kernels::adamw_step(p, g, m, v, h), exa::Error);
  h.variance_frozen_at = 0;
  EXPECT_THROW(exa::kernels::adamw_step(p, short_g, m, v, h), exa::Error);
  EXPECT_NO_THROW(exa::kernels::adamw_step(p, g, m, v, h));
}
