#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/router.hpp"

using namespace exa::test;
using exa::kernels::RouterLosses;
using exa::kernels::RouterOptions;

namespace {

template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;

template <class T>
struct Router {
  int N, E, K;
  V2<T> logits, probs, gates;
  V1<T> lse;
  V2<int> topk;
  V1<int> counts;
  V1<T> bias;  // the selection bias; empty: the unbiased overload
  Router(int n, int e, int k)
      : N(n), E(e), K(k), logits("logits", n, e), probs("probs", n, e), gates("gates", n, k), lse("lse", n),
        topk("topk", n, k), counts("counts", e) {}
  RouterLosses forward(const RouterOptions& o) {
    if (bias.extent(0) > 0) return exa::kernels::router_forward(logits, bias, o, probs, lse, topk, gates, counts);
    return exa::kernels::router_forward(logits, o, probs, lse, topk, gates, counts);
  }
  void set_bias(const std::vector<double>& b) {
    bias = V1<T>("bias", b.size());
    auto h = Kokkos::create_mirror_view(bias);
    for (std::size_t e = 0; e < b.size(); ++e) h(e) = T(b[e]);
    Kokkos::deep_copy(bias, h);
  }
};

// Logits whose ranking in each row is a permutation with gaps >= 0.2, so a
// finite-difference step never changes the top-k selection.
template <class V>
void fill_separated(const V& logits, std::uint64_t seed) {
  fill_uniform(logits, seed, 0.0, 0.2);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits);
  const int N = h.extent(0), E = h.extent(1);
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) h(n, e) += 0.4 * ((3 * n + 5 * e) % E) - 1.2;
  Kokkos::deep_copy(logits, h);
}

// Host reference of everything router_forward computes, in double. The
// ranking uses the kernel's own probabilities (plus the bias, added in T as
// the kernel adds it) so that rounding cannot turn a tie into a non-tie or
// back; gates, counts and losses come from the unbiased probabilities.
template <class T>
void check_forward_against_host(Router<T>& r, const RouterOptions& o, const RouterLosses& got, double tol) {
  std::vector<T> hb(r.E, T(0));
  if (r.bias.extent(0) > 0) {
    auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.bias);
    for (int e = 0; e < r.E; ++e) hb[e] = b(e);
  }
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.logits);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.probs);
  auto hlse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.lse);
  auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.topk);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.gates);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.counts);
  std::vector<double> count(r.E, 0.0), pmean(r.E, 0.0);
  double z = 0, wp = 0, wg = 0;
  for (int n = 0; n < r.N; ++n) {
    double m = -1e300, s = 0;
    for (int e = 0; e < r.E; ++e) m = std::max(m, double(hl(n, e)));
    for (int e = 0; e < r.E; ++e) s += std::exp(double(hl(n, e)) - m);
    const double lse = m + std::log(s);
    wp = std::max(wp, std::fabs(double(hlse(n)) - lse));
    z += lse * lse;
    for (int e = 0; e < r.E; ++e) {
      const double p = std::exp(double(hl(n, e)) - lse);
      wp = std::max(wp, std::fabs(double(hp(n, e)) - p));
      pmean[e] += p / r.N;
    }
    std::vector<int> order(r.E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return T(hp(n, a)) + hb[a] > T(hp(n, b)) + hb[b]; });
    double gsum = 0, psel = 0;
    for (int j = 0; j < r.K; ++j) {
      EXPECT_EQ(hi(n, j), order[j]) << "token " << n << " slot " << j;
      count[order[j]] += 1;
      gsum += double(hg(n, j));
      psel += double(hp(n, order[j]));
    }
    for (int j = 0; j < r.K; ++j) {
      const double expect = double(hp(n, order[j])) / (o.norm_topk ? psel : 1.0);
      wg = std::max(wg, std::fabs(double(hg(n, j)) - expect));
    }
    if (o.norm_topk) {
      EXPECT_NEAR(gsum, 1.0, tol) << "gates of token " << n;
    }
  }
  double fp = 0;
  for (int e = 0; e < r.E; ++e) {
    EXPECT_EQ(hc(e), int(count[e])) << "expert " << e;
    fp += count[e] / (double(r.N) * r.K) * pmean[e];
  }
  const double aux = o.aux_coef * r.E * fp;
  const double zl = o.z_coef * z / r.N;
  std::printf("[fwd %s] router N%d E%d k%d norm%d: probs/lse err %.3e, gates err %.3e, aux %.9g (host %.9g), "
              "z %.9g (host %.9g), tol %.1e\n",
              EXAMOE_TEST_BACKEND_NAME, r.N, r.E, r.K, int(o.norm_topk), wp, wg, got.aux, aux, got.z, zl, tol);
  EXPECT_LE(wp, tol);
  EXPECT_LE(wg, tol);
  EXPECT_NEAR(got.aux, aux, tol * std::max(1.0, std::fabs(aux)));
  EXPECT_NEAR(got.z, zl, tol * std::max(1.0, std::fabs(zl)));
}

void check_backward_fd(int N, int E, int K, const RouterOptions& o, double d_aux, double d_z,
                       const std::vector<double>& bias = {}) {
  Router<double> r(N, E, K);
  fill_separated(r.logits, 7 + K);
  if (!bias.empty()) r.set_bias(bias);
  V2<double> rg("r", N, K), dlogits("dlogits", N, E);
  fill_uniform(rg, 8);
  const RouterLosses l0 = r.forward(o);
  // Treat the top-k selection as fixed: check it is stable under the probe.
  auto idx0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.topk);
  Kokkos::deep_copy(dlogits, std::nan(""));
  exa::kernels::router_backward(rg, r.probs, r.lse, r.topk, r.gates, r.counts, o, d_aux, d_z, dlogits);
  (void)l0;
  bool selection_moved = false;
  auto loss = [&] {
    const RouterLosses l = r.forward(o);
    auto idx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.topk);
    for (std::size_t i = 0; i < idx.span(); ++i) selection_moved |= idx.data()[i] != idx0.data()[i];
    return dot(r.gates, rg) + d_aux * l.aux + d_z * l.z;
  };
  char tag[96];
  std::snprintf(tag, sizeof tag, "router/dlogits k%d norm%d aux%g z%g", K, int(o.norm_topk), o.aux_coef, o.z_coef);
  expect_grad_matches_fd(tag, r.logits, dlogits, loss, 1e-6);
  EXPECT_FALSE(selection_moved) << "test inputs let the top-k selection flip";
}

}  // namespace

TEST(Router, ForwardMatchesHostFp32) {
  Router<float> r(37, 8, 2);
  fill_uniform(r.logits, 5, -3.0, 3.0);
  RouterOptions o{true, 0.01, 0.001};
  check_forward_against_host(r, o, r.forward(o), 2e-6);
  o.norm_topk = false;
  check_forward_against_host(r, o, r.forward(o), 2e-6);
}

TEST(Router, ForwardMatchesHostFp64) {
  Router<double> r(23, 6, 3);
  fill_uniform(r.logits, 6, -3.0, 3.0);
  const RouterOptions o{true, 0.5, 0.2};
  check_forward_against_host(r, o, r.forward(o), 1e-12);
}

TEST(Router, TiesGoToLowerExpertId) {
  Router<float> r(3, 6, 3);
  auto h = Kokkos::create_mirror_view(r.logits);
  const float rows[3][6] = {{0, 0, 0, 0, 0, 0}, {0.1f, 0.7f, 0.7f, -1, 0.7f, 0.2f}, {2, -1, 3, 3, -1, 2}};
  for (int n = 0; n < 3; ++n)
    for (int e = 0; e < 6; ++e) h(n, e) = rows[n][e];
  Kokkos::deep_copy(r.logits, h);
  const RouterOptions o{true, 0.0, 0.0};
  r.forward(o);
  auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.topk);
  const int expect[3][3] = {{0, 1, 2}, {1, 2, 4}, {2, 3, 0}};
  for (int n = 0; n < 3; ++n)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(hi(n, j), expect[n][j]) << "token " << n << " slot " << j;
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.gates);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(hg(0, j), 1.0 / 3.0, 1e-7);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.counts);
  const int ecount[6] = {2, 2, 3, 1, 1, 0};
  for (int e = 0; e < 6; ++e) EXPECT_EQ(hc(e), ecount[e]) << "expert " << e;
}

TEST(Router, TopOneNormalisedGateIsOne) {
  Router<float> r(9, 4, 1);
  fill_uniform(r.logits, 9, -2.0, 2.0);
  r.forward(RouterOptions{true, 0.0, 0.0});
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.gates);
  for (int n = 0; n < 9; ++n) EXPECT_EQ(hg(n, 0), 1.0f);
}

TEST(Router, BackwardGatesOnlyMatchesFiniteDifferences) {
  check_backward_fd(6, 8, 2, RouterOptions{true, 0.0, 0.0}, 1.0, 1.0);
  check_backward_fd(6, 8, 3, RouterOptions{false, 0.0, 0.0}, 1.0, 1.0);
}

TEST(Router, BackwardWithAuxAndZLossMatchesFiniteDifferences) {
  check_backward_fd(7, 8, 2, RouterOptions{true, 0.5, 0.2}, 1.0, 1.0);
  check_backward_fd(7, 8, 2, RouterOptions{false, 0.5, 0.2}, 0.7, 1.3);  // upstream scales
  check_backward_fd(5, 8, 1, RouterOptions{true, 0.5, 0.2}, 1.0, 1.0);   // gate == 1: losses only
}

TEST(Router, AuxOnlyAndZOnlyGradients) {
  check_backward_fd(6, 8, 2, RouterOptions{true, 1.0, 0.0}, 1.0, 0.0);
  check_backward_fd(6, 8, 2, RouterOptions{true, 0.0, 1.0}, 0.0, 1.0);
}

// A bias that favours expert 7 and disfavours expert 0: every token picks 7,
// none picks 0, some selections change, and the probabilities and the gates
// (the unbiased probabilities of the chosen experts) follow the host
// reference.
TEST(Router, BiasChangesSelectionOnly) {
  const int N = 41, E = 8, K = 2;
  Router<float> r(N, E, K);
  fill_uniform(r.logits, 11, -2.0, 2.0);
  const RouterOptions o{true, 0.01, 0.001};
  const RouterLosses plain = r.forward(o);
  // Copies (a host mirror of a host View would alias it).
  auto copy = [](const auto& v) {
    auto h = Kokkos::create_mirror(Kokkos::HostSpace(), v);
    Kokkos::deep_copy(h, v);
    return h;
  };
  const auto p0 = copy(r.probs);
  const auto l0 = copy(r.lse);
  const auto i0 = copy(r.topk);
  std::vector<double> bias(E);
  for (int e = 0; e < E; ++e) bias[e] = 0.01 * ((3 * e) % E) - 0.04;
  bias[7] = 2.0;   // above any probability gap
  bias[0] = -2.0;  // below
  r.set_bias(bias);
  const RouterLosses got = r.forward(o);
  check_forward_against_host(r, o, got, 2e-6);
  auto p1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.probs);
  auto l1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.lse);
  auto i1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.topk);
  int changed = 0;
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(l1(n), l0(n));
    for (int e = 0; e < E; ++e) EXPECT_EQ(p1(n, e), p0(n, e)) << "token " << n << " expert " << e;
    EXPECT_EQ(i1(n, 0), 7) << "token " << n;
    EXPECT_NE(i1(n, 1), 0) << "token " << n;
    for (int j = 0; j < K; ++j) changed += i1(n, j) != i0(n, j);
  }
  EXPECT_GT(changed, 0);
  EXPECT_EQ(got.z, plain.z);  // z depends on the logits only
}

// An empty bias View is no bias: the same bits as the unbiased overload.
TEST(Router, EmptyBiasIsUnbiased) {
  Router<float> a(19, 6, 2), b(19, 6, 2);
  fill_uniform(a.logits, 12, -3.0, 3.0);
  Kokkos::deep_copy(b.logits, a.logits);
  const RouterOptions o{true, 0.01, 0.001};
  const RouterLosses la = a.forward(o);
  const RouterLosses lb =
      exa::kernels::router_forward(b.logits, V1<float>(), o, b.probs, b.lse, b.topk, b.gates, b.counts);
  EXPECT_EQ(la.aux, lb.aux);
  EXPECT_EQ(la.z, lb.z);
  auto ia = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.topk);
  auto ib = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.topk);
  auto ga = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.gates);
  auto gb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.gates);
  for (int n = 0; n < 19; ++n)
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(ia(n, j), ib(n, j));
      EXPECT_EQ(ga(n, j), gb(n, j));
    }
}

// The backward is unchanged by a bias: the gates are the unbiased
// probabilities of the (now biased) selection, which the gradient holds fixed.
TEST(Router, BackwardWithBiasMatchesFiniteDifferences) {
  const std::vector<double> bias = {0.3, -0.2, 0.25, 0.0, -0.35, 0.15, 0.05, -0.1};
  check_backward_fd(6, 8, 2, RouterOptions{true, 0.5, 0.2}, 1.0, 1.0, bias);
  check_backward_fd(6, 8, 3, RouterOptions{false, 0.0, 0.0}, 1.0, 1.0, bias);
}

// Expert growth's clones (kernels/router.hpp, `ring` and `canon`): experts
// 4 and 5 are copies of 1 and 3 (the same logits up to a gemm's rounding).
// With the families given, every token chooses the same experts as the
// ungrown router up to parent <-> child, with the same renormalised gates,
// (to round-off), and each family's tokens are split between its members; without them,
// some token spends two slots on one family (the negative control).
TEST(Router, ClonesSplitTokensAndKeepTheChosenSet) {
  const int N = 96, E0 = 4, E = 6, K = 2;
  const int parent[E] = {0, 1, 2, 3, 1, 3};
  Router<float> base(N, E0, K), grown(N, E, K), plain(N, E, K);
  fill_uniform(base.logits, 31, -2.0, 2.0);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base.logits);
  auto hg = Kokkos::create_mirror_view(grown.logits);
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) hg(n, e) = hb(n, parent[e]);
  Kokkos::deep_copy(grown.logits, hg);
  Kokkos::deep_copy(plain.logits, hg);
  V1<int> ring("ring", E);
  auto hr = Kokkos::create_mirror_view(ring);
  const int next[E] = {0, 4, 2, 5, 1, 3};
  for (int e = 0; e < E; ++e) hr(e) = next[e];
  Kokkos::deep_copy(ring, hr);
  const RouterOptions o{true, 0.0, 0.0};
  base.forward(o);
  plain.forward(o);
  // Clones read their parent's logit: nudge theirs by a rounding error
  // (a gemm's other summation order), which must not matter.
  V1<int> canon("canon", E);
  auto hc = Kokkos::create_mirror_view(canon);
  for (int e = 0; e < E; ++e) hc(e) = parent[e];
  Kokkos::deep_copy(canon, hc);
  for (int n = 0; n < N; ++n) hg(n, 4) = std::nextafter(hg(n, 4), 10.0f);
  Kokkos::deep_copy(grown.logits, hg);
  exa::kernels::router_forward(grown.logits, V1<float>(), ring, canon, o, grown.probs, grown.lse, grown.topk,
                               grown.gates, grown.counts);
  auto ib = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base.topk);
  auto ig = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grown.topk);
  auto ip = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plain.topk);
  auto gb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base.gates);
  auto gg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grown.gates);
  int taken[E] = {}, doubled = 0;
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < K; ++j) {
      ++taken[ig(n, j)];
      EXPECT_EQ(parent[ig(n, j)], ib(n, j)) << "token " << n << " pick " << j;
      // The same ratio of probabilities whose softmax had two more terms:
      // equal to round-off.
      EXPECT_NEAR(gg(n, j), gb(n, j), 1e-6 * gb(n, j)) << "token " << n << " pick " << j;
    }
    doubled += parent[ip(n, 0)] == parent[ip(n, 1)];
  }
  for (int e = 0; e < E; ++e) EXPECT_GT(taken[e], 0) << "expert " << e << " took no token";
  EXPECT_GT(doubled, 0) << "without the families no token took a parent and its clone: the control shows nothing";
}
