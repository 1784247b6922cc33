#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/cross_entropy.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {
template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
using Tgt = Kokkos::View<std::int32_t*, Kokkos::LayoutRight, TestDevice>;

Tgt make_targets(const std::vector<std::int32_t>& t) {
  Tgt v("targets", t.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < t.size(); ++i) h(i) = t[i];
  Kokkos::deep_copy(v, h);
  return v;
}

struct RefCE {
  std::vector<double> lse, loss;
  double mean = 0;
  index_t n_valid = 0;
};

template <class L>
RefCE ref_ce(const L& logits, const std::vector<std::int32_t>& t) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits);
  RefCE r;
  double sum = 0;
  for (std::size_t n = 0; n < h.extent(0); ++n) {
    double mx = -INFINITY;
    for (std::size_t j = 0; j < h.extent(1); ++j) mx = std::max(mx, double(h(n, j)));
    double s = 0;
    for (std::size_t j = 0; j < h.extent(1); ++j) s += std::exp(double(h(n, j)) - mx);
    r.lse.push_back(mx + std::log(s));
    r.loss.push_back(t[n] >= 0 ? r.lse.back() - double(h(n, t[n])) : 0.0);
    if (t[n] >= 0) {
      sum += r.loss.back();
      ++r.n_valid;
    }
  }
  r.mean = r.n_valid ? sum / double(r.n_valid) : 0.0;
  return r;
}

const std::vector<std::int32_t> kTargets = {3, -1, 0, 10, -1, 7};
constexpr index_t kN = 6, kV = 11;
}  // namespace

TEST(CrossEntropy, ForwardMatchesReference) {
  V2<double> logits("logits", kN, kV);
  V1<double> lse("lse", kN), rows("rows", kN);
  fill_uniform(logits, 1, -4.0, 4.0);
  auto tgt = make_targets(kTargets);
  const auto ref = ref_ce(logits, kTargets);
  const auto sum = ek::cross_entropy_forward_sum(logits, tgt, lse);
  EXPECT_EQ(sum.n_valid, 4);
  EXPECT_NEAR(sum.mean(), ref.mean, 1e-14);
  EXPECT_NEAR(ek::cross_entropy_forward(logits, tgt, lse), ref.mean, 1e-14);
  ek::cross_entropy_rows(logits, tgt, lse, rows);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), rows);
  for (index_t n = 0; n < kN; ++n) {
    EXPECT_NEAR(hl(n), ref.lse[n], 1e-14);
    EXPECT_NEAR(hr(n), ref.loss[n], 1e-14);
  }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  V2<double> logits("logits", kN, kV), dlogits("dlogits", kN, kV);
  V1<double> lse("lse", kN);
  fill_uniform(logits, 2, -4.0, 4.0);
  auto tgt = make_targets(kTargets);
  const double dloss = 0.7;
  const auto s = ek::cross_entropy_forward_sum(logits, tgt, lse);
  fill_uniform(dlogits, 3);  // garbage, including ignored rows: must be overwritten
  ek::cross_entropy_backward(logits, tgt, lse, dloss, s.n_valid, dlogits);
  expect_grad_matches_fd("cross_entropy/dlogits", logits, dlogits, [&] {
    V1<double> l("l", kN);
    return dloss * ek::cross_entropy_forward(logits, tgt, l);
  });
}

TEST(CrossEntropy, InPlaceBackwardEqualsOutOfPlace) {
  V2<float> logits("logits", kN, kV), d("d", kN, kV);
  V1<float> lse("lse", kN);
  fill_uniform(logits, 4, -4.0, 4.0);
  auto tgt = make_targets(kTargets);
  const auto s = ek::cross_entropy_forward_sum(logits, tgt, lse);
  ek::cross_entropy_backward(logits, tgt, lse, 1.0, s.n_valid, d);
  ek::cross_entropy_backward(logits, tgt, lse, 1.0, s.n_valid, logits);
  EXPECT_EQ(max_rel_diff(logits, d), 0.0);
  // each non-ignored row of the gradient sums to zero
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  for (index_t n = 0; n < kN; ++n) {
    double rs = 0;
    for (index_t j = 0; j < kV; ++j) rs += h(n, j);
    EXPECT_NEAR(rs, 0.0, 1e-7);
  }
}

TEST(CrossEntropy, AllIgnoredGivesZero) {
  V2<double> logits("logits", 3, 5), d("d", 3, 5);
  V1<double> lse("lse", 3);
  fill_uniform(logits, 5);
  fill_uniform(d, 6);
  auto tgt = make_targets({-1, -1, -100});
  const auto s = ek::cross_entropy_forward_sum(logits, tgt, lse);
  EXPECT_EQ(s.n_valid, 0);
  EXPECT_EQ(s.mean(), 0.0);
  ek::cross_entropy_backward(logits, tgt, lse, 1.0, s.n_valid, d);
  EXPECT_EQ(dot(d, d), 0.0);
}

// Large, shifted logits in fp32: the max-shift keeps exp finite and the
// double sum keeps the mean within fp32 rounding of the double reference.
TEST(CrossEntropy, Fp32LargeLogitsMatchDoubleReference) {
  const index_t N = 16, V = 300;
  V2<float> logits("logits", N, V), d("d", N, V);
  V1<float> lse("lse", N);
  fill_uniform(logits, 7, 60.0, 120.0);
  std::vector<std::int32_t> t(N);
  for (index_t n = 0; n < N; ++n) t[n] = n == 5 ? -1 : std::int32_t((n * 37) % V);
  auto tgt = make_targets(t);
  const auto ref = ref_ce(logits, t);
  const auto s = ek::cross_entropy_forward_sum(logits, tgt, lse);
  std::printf("[ce %s] fp32 mean loss %.9g vs double %.9g\n", EXAMOE_TEST_BACKEND_NAME, s.mean(), ref.mean);
  EXPECT_NEAR(s.mean(), ref.mean, 1e-5 * std::fabs(ref.mean));
  ek::cross_entropy_backward(logits, tgt, lse, 1.0, s.n_valid, d);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits);
  double worst = 0;
  for (index_t n = 0; n < N; ++n)
    for (index_t j = 0; j < V; ++j) {
      const double p = t[n] < 0 ? 0.0 : std::exp(double(hl(n, j)) - ref.lse[n]) - (j == t[n] ? 1.0 : 0.0);
      worst = std::max(worst, std::fabs(double(h(n, j)) - p / double(ref.n_valid)));
    }
  EXPECT_LT(worst, 1e-6);
}
