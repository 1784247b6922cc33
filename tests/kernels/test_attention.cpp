#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/attention.hpp"

using namespace exa::test;
using exa::kernels::AttentionTiles;

namespace {

template <class T>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;

struct Cfg {
  int B, T, H, Hkv, hd;
};

// Full-softmax causal GQA attention on the host, in double.
template <class Q, class K, class V>
void reference_forward(const Cfg& c, const Q& q, const K& k, const V& v, std::vector<double>& out,
                       std::vector<double>& lse) {
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  out.assign(static_cast<std::size_t>(c.B) * c.T * c.H * c.hd, 0.0);
  lse.assign(static_cast<std::size_t>(c.B) * c.H * c.T, 0.0);
  const int rep = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.hd));
  std::vector<double> s(c.T);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.T; ++i) {
        const int g = h / rep;
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int e = 0; e < c.hd; ++e) d += double(hq(b, i, h, e)) * double(hk(b, j, g, e));
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = 0; j <= i; ++j) l += std::exp(s[j] - m);
        lse[(static_cast<std::size_t>(b) * c.H + h) * c.T + i] = m + std::log(l);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m) / l;
          for (int e = 0; e < c.hd; ++e)
            out[((static_cast<std::size_t>(b) * c.T + i) * c.H + h) * c.hd + e] += p * double(hv(b, j, g, e));
        }
      }
}

template <class T>
void check_forward(const Cfg& c, AttentionTiles tiles, double tol) {
  V4<T> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd);
  V4<T> out("out", c.B, c.T, c.H, c.hd);
  V3<T> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 11, -2.0, 2.0);
  fill_uniform(k, 12, -2.0, 2.0);
  fill_uniform(v, 13);
  Kokkos::deep_copy(out, T(std::nan("")));  // the kernel must not read stale output
  exa::kernels::attention_forward(q, k, v, out, lse, tiles);
  std::vector<double> ro, rl;
  reference_forward(c, q, k, v, ro, rl);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  double wo = 0, wl = 0;
  for (std::size_t i = 0; i < ro.size(); ++i) wo = std::max(wo, std::fabs(double(ho.data()[i]) - ro[i]));
  for (std::size_t i = 0; i < rl.size(); ++i) wl = std::max(wl, std::fabs(double(hl.data()[i]) - rl[i]));
  std::printf("[fwd %s] B%d T%d H%d Hkv%d hd%d tiles %dx%d host %d %s: max |out err| %.3e, max |lse err| %.3e, tol %.1e\n",
              EXAMOE_TEST_BACKEND_NAME, c.B, c.T, c.H, c.Hkv, c.hd, tiles.block_q, tiles.block_k,
              tiles.host_block_q, sizeof(T) == 4 ? "fp32" : "fp64", wo, wl, tol);
  EXPECT_LE(wo, tol);
  EXPECT_LE(wl, tol);
}

void check_backward_fd(const Cfg& c, AttentionTiles tiles, std::size_t max_checks = 0) {
  using T = double;
  V4<T> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd);
  V4<T> out("out", c.B, c.T, c.H, c.hd), r("r", c.B, c.T, c.H, c.hd);
  V4<T> dq("dq", c.B, c.T, c.H, c.hd), dk("dk", c.B, c.T, c.Hkv, c.hd), dv("dv", c.B, c.T, c.Hkv, c.hd);
  V3<T> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 21, -1.5, 1.5);
  fill_uniform(k, 22, -1.5, 1.5);
  fill_uniform(v, 23);
  fill_uniform(r, 24);
  exa::kernels::attention_forward(q, k, v, out, lse, tiles);
  Kokkos::deep_copy(dq, T(std::nan("")));
  Kokkos::deep_copy(dk, T(std::nan("")));
  Kokkos::deep_copy(dv, T(std::nan("")));
  exa::kernels::attention_backward(r, q, k, v, out, lse, dq, dk, dv, tiles);
  auto loss = [&] {
    exa::kernels::attention_forward(q, k, v, out, lse, tiles);
    return dot(out, r);
  };
  char tag[96];
  std::snprintf(tag, sizeof tag, "H%d/Hkv%d T%d t%dx%d h%d", c.H, c.Hkv, c.T, tiles.block_q, tiles.block_k,
                tiles.host_block_q);
  expect_grad_matches_fd(std::string("attention/dq ") + tag, q, dq, loss, 1e-6, 1e-5, max_checks);
  expect_grad_matches_fd(std::string("attention/dk ") + tag, k, dk, loss, 1e-6, 1e-5, max_checks);
  expect_grad_matches_fd(std::string("attention/dv ") + tag, v, dv, loss, 1e-6, 1e-5, max_checks);
}

}  // namespace

TEST(Attention, ForwardMatchesFullSoftmaxGQA) {
  const Cfg c{2, 13, 4, 2, 8};
  check_forward<double>(c, {4, 5}, 1e-12);  // many partial tiles
  check_forward<double>(c, {3, 8}, 1e-12);
  check_forward<double>(c, {}, 1e-12);  // one partial tile
  check_forward<float>(c, {4, 5}, 2e-6);
  check_forward<float>(c, {}, 2e-6);
}

TEST(Attention, ForwardMatchesFullSoftmaxMHA) {
  const Cfg c{1, 11, 3, 3, 6};
  check_forward<double>(c, {4, 4}, 1e-12);
  check_forward<float>(c, {5, 3}, 2e-6);
}

TEST(Attention, ForwardMultiQuery) {
  const Cfg c{1, 9, 4, 1, 4};
  check_forward<double>(c, {2, 3}, 1e-12);
}

TEST(Attention, ForwardLongerSequenceDefaultTiles) {
  const Cfg c{1, 70, 2, 1, 16};  // crosses the default 32-row tiles
  check_forward<double>(c, {}, 1e-12);
  check_forward<float>(c, {}, 2e-6);
}

TEST(Attention, ForwardWideHeadsUseLevel1Scratch) {
  const Cfg c{1, 40, 2, 1, 64};  // fp64 tiles exceed a host team's level-0 scratch
  check_forward<double>(c, {}, 1e-12);
}

TEST(Attention, BackwardMatchesFiniteDifferencesGQA) { check_backward_fd({2, 11, 4, 2, 4}, {4, 3}); }

TEST(Attention, BackwardMatchesFiniteDifferencesMHA) { check_backward_fd({1, 10, 2, 2, 5}, {3, 4}); }

TEST(Attention, BackwardMatchesFiniteDifferencesDefaultTiles) { check_backward_fd({1, 9, 2, 1, 4}, {}); }

TEST(Attention, BackwardMatchesFiniteDifferencesWideHeads) { check_backward_fd({1, 37, 2, 1, 64}, {}, 150); }

TEST(Attention, BackwardIsBitReproducible) {
  const Cfg c{1, 12, 4, 2, 4};
  AttentionTiles tiles{4, 4};
  V4<float> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd);
  V4<float> out("out", c.B, c.T, c.H, c.hd), r("r", c.B, c.T, c.H, c.hd);
  V4<float> dq("dq", c.B, c.T, c.H, c.hd), dk("dk", c.B, c.T, c.Hkv, c.hd), dv("dv", c.B, c.T, c.Hkv, c.hd);
  V4<float> dq2("dq2", c.B, c.T, c.H, c.hd), dk2("dk2", c.B, c.T, c.Hkv, c.hd), dv2("dv2", c.B, c.T, c.Hkv, c.hd);
  V3<float> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 1);
  fill_uniform(k, 2);
  fill_uniform(v, 3);
  fill_uniform(r, 4);
  exa::kernels::attention_forward(q, k, v, out, lse, tiles);
  exa::kernels::attention_backward(r, q, k, v, out, lse, dq, dk, dv, tiles);
  exa::kernels::attention_backward(r, q, k, v, out, lse, dq2, dk2, dv2, tiles);
  EXPECT_EQ(max_rel_diff(dq, dq2), 0.0);
  EXPECT_EQ(max_rel_diff(dk, dk2), 0.0);
  EXPECT_EQ(max_rel_diff(dv, dv2), 0.0);
}

// ---- Host (gemm) path: small host_block_q so that T is not a multiple of the
// query tile and many tiles skip future keys. On host backends these go
// through attention_forward/backward's gemm path; on device backends through
// the team kernels (the tiles then only change block_q/block_k).

TEST(Attention, HostPathForwardMatchesFullSoftmaxGQA) {
  const Cfg c{2, 13, 4, 2, 8};
  check_forward<double>(c, {4, 5, 5}, 1e-12);
  check_forward<double>(c, {4, 5, 1}, 1e-12);   // one query row per tile
  check_forward<double>(c, {4, 5, 13}, 1e-12);  // one exact tile
  check_forward<double>(c, {4, 5, 100}, 1e-12); // tile larger than T
  check_forward<float>(c, {4, 5, 4}, 2e-6);
}

TEST(Attention, HostPathForwardMultiQueryAndLonger) {
  check_forward<double>({1, 9, 4, 1, 4}, {2, 3, 2}, 1e-12);
  check_forward<double>({2, 150, 4, 2, 16}, {}, 1e-12);  // 64-row host tiles, partial last tile
  check_forward<float>({2, 150, 4, 2, 16}, {}, 2e-6);
}

TEST(Attention, HostPathBackwardMatchesFiniteDifferencesGQA) { check_backward_fd({2, 11, 4, 2, 4}, {4, 3, 3}); }

TEST(Attention, HostPathBackwardMatchesFiniteDifferencesMQA) { check_backward_fd({1, 10, 3, 1, 5}, {3, 4, 4}); }

TEST(Attention, HostPathBackwardMatchesFiniteDifferencesSingleRowTiles) {
  check_backward_fd({1, 7, 2, 1, 3}, {3, 4, 1});
}

TEST(Attention, HostPathBackwardMatchesFiniteDifferencesLong) {
  check_backward_fd({1, 70, 4, 2, 8}, {}, 200);  // 64-row tiles + a 6-row tile
}

TEST(Attention, HostPathBackwardIsBitReproducible) {
  const Cfg c{2, 37, 4, 2, 8};
  AttentionTiles tiles{4, 4, 8};
  V4<float> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd);
  V4<float> out("out", c.B, c.T, c.H, c.hd), r("r", c.B, c.T, c.H, c.hd);
  V4<float> dq("dq", c.B, c.T, c.H, c.hd), dk("dk", c.B, c.T, c.Hkv, c.hd), dv("dv", c.B, c.T, c.Hkv, c.hd);
  V4<float> dq2("dq2", c.B, c.T, c.H, c.hd), dk2("dk2", c.B, c.T, c.Hkv, c.hd), dv2("dv2", c.B, c.T, c.Hkv, c.hd);
  V3<float> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 5);
  fill_uniform(k, 6);
  fill_uniform(v, 7);
  fill_uniform(r, 8);
  exa::kernels::attention_forward(q, k, v, out, lse, tiles);
  exa::kernels::attention_backward(r, q, k, v, out, lse, dq, dk, dv, tiles);
  Kokkos::deep_copy(dk2, 7.0f);  // stale gradients must be overwritten
  Kokkos::deep_copy(dv2, 7.0f);
  exa::kernels::attention_backward(r, q, k, v, out, lse, dq2, dk2, dv2, tiles);
  EXPECT_EQ(max_rel_diff(dq, dq2), 0.0);
  EXPECT_EQ(max_rel_diff(dk, dk2), 0.0);
  EXPECT_EQ(max_rel_diff(dv, dv2), 0.0);
}

// Both implementations on host views (the team kernels run on any backend):
// forward outputs, lse and all gradients agree.
template <class T>
void check_paths_agree(const Cfg& c, AttentionTiles tiles, double tol) {
  namespace ad = exa::kernels::attention_detail;
  using H4 = Kokkos::View<T****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using H3 = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  H4 q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd);
  H4 r("r", c.B, c.T, c.H, c.hd);
  H4 o1("o1", c.B, c.T, c.H, c.hd), o2("o2", c.B, c.T, c.H, c.hd);
  H3 l1("l1", c.B, c.H, c.T), l2("l2", c.B, c.H, c.T);
  H4 dq1("dq1", c.B, c.T, c.H, c.hd), dk1("dk1", c.B, c.T, c.Hkv, c.hd), dv1("dv1", c.B, c.T, c.Hkv, c.hd);
  H4 dq2("dq2", c.B, c.T, c.H, c.hd), dk2("dk2", c.B, c.T, c.Hkv, c.hd), dv2("dv2", c.B, c.T, c.Hkv, c.hd);
  fill_uniform(q, 31, -2.0, 2.0);
  fill_uniform(k, 32, -2.0, 2.0);
  fill_uniform(v, 33);
  fill_uniform(r, 34);
  ad::forward_team(q, k, v, o1, l1, tiles);
  ad::forward_host(q, k, v, o2, l2, tiles);
  ad::backward_team(r, q, k, v, o1, l1, dq1, dk1, dv1, tiles);
  ad::backward_host(r, q, k, v, o2, l2, dq2, dk2, dv2, tiles);
  const double e[5] = {max_rel_diff(o2, o1), max_rel_diff(l2, l1), max_rel_diff(dq2, dq1), max_rel_diff(dk2, dk1),
                       max_rel_diff(dv2, dv1)};
  std::printf("[paths %s] B%d T%d H%d Hkv%d hd%d host tile %d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e, tol %.1e\n",
              sizeof(T) == 4 ? "fp32" : "fp64", c.B, c.T, c.H, c.Hkv, c.hd, tiles.host_block_q, e[0], e[1], e[2],
              e[3], e[4], tol);
  for (double x : e) EXPECT_LE(x, tol);
}

TEST(Attention, HostAndTeamPathsAgree) {
  check_paths_agree<double>({2, 13, 4, 2, 8}, {4, 5, 5}, 1e-12);
  check_paths_agree<double>({1, 100, 4, 1, 16}, {}, 1e-12);
  check_paths_agree<float>({2, 77, 4, 2, 64}, {16, 16, 32}, 2e-5);
}
