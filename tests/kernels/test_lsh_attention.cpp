// LSH attention (kernels/lsh_attention.hpp): with one chunk it is causal
// attention; with many it is a softmax over exactly the union of the rounds'
// chunk windows (checked against a masked softmax whose mask is rebuilt from
// the sort); the backward agrees with finite differences; splitting the kv
// heads over ranks (tensor parallelism) gives the same result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/attention.hpp"
#include "kernels/lsh_attention.hpp"
#include "packed_documents.hpp"

using namespace exa::test;
using exa::kernels::AttentionOffsets;
using exa::kernels::LshConfig;

namespace {

template <class T>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;

constexpr double kInf = std::numeric_limits<double>::infinity();


double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::isnan(a[i]) ? kInf : std::fabs(a[i] - b[i]));
  return w;
}

// max |a - b| / max(1, |b|): float rounding grows with the magnitude.
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    w = std::max(w, std::isnan(a[i]) ? kInf : std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i])));
  return w;
}

struct Case {
  const char* name;
  int B, T, H, Hkv, hd;
  LshConfig lsh;
  std::vector<int> cuts;  // empty: no documents
};

const std::vector<Case> kCases = {
    {"one round, chunks of 4", 2, 24, 2, 1, 4, {1, 4, 1}, {}},
    {"three rounds, GQA", 1, 30, 4, 2, 6, {3, 5, 1}, {}},
    {"two rounds, two chunks back", 2, 23, 2, 2, 4, {2, 3, 2}, {}},
    {"no chunk back", 1, 20, 2, 1, 4, {2, 4, 0}, {}},
    {"packed documents", 2, 26, 4, 2, 4, {2, 4, 1}, {5, 6, 13, 20}},
    {"many buckets (two-factor hash)", 1, 80, 2, 1, 4, {2, 2, 1}, {}},
    {"local round", 2, 24, 2, 1, 4, {1, 4, 1, 0, 0, true}, {}},
    {"local round, packed documents", 2, 26, 4, 2, 4, {2, 3, 0, 0, 0, true}, {5, 6, 13, 20}},
};

template <class T>
struct Tensors {
  V4<T> q, k, v, out;
  V3<T> lse;
  Tensors(const Case& c, std::uint64_t seed)
      : q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.T, c.Hkv, c.hd), v("v", c.B, c.T, c.Hkv, c.hd),
        out("out", c.B, c.T, c.H, c.hd), lse("lse", c.B, c.H, c.T) {
    fill_uniform(q, seed, -2.0, 2.0);
    fill_uniform(k, seed + 1, -2.0, 2.0);
    fill_uniform(v, seed + 2);
  }
};

// The pairs LSH attention must see, rebuilt from the sort: j <= i in i's
// document, and in some round j's chunk is i's or one of the chunks_before
// before it.
std::vector<char> lsh_mask(const Case& c, const V4<double>& k, const Docs* docs) {
  const auto s = exa::kernels::lsh_detail::hash_and_sort(k, c.lsh, exa::exec_of<V4<double>>{});
  auto rank = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s.rank);
  auto perm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s.perm);
  std::vector<char> m(std::size_t(c.B) * c.Hkv * c.T * c.T, 0);
  for (int b = 0; b < c.B; ++b)
    for (int g = 0; g < c.Hkv; ++g)
      for (int r = 0; r < c.lsh.rounds(); ++r) {
        for (int p = 0; p < c.T; ++p) EXPECT_EQ(perm(b, g, r, rank(b, g, r, p)), p) << "perm and rank are not inverse";
        for (int i = 0; i < c.T; ++i)
          for (int j = 0; j <= i; ++j) {
            const int ci = rank(b, g, r, i) / c.lsh.bucket, cj = rank(b, g, r, j) / c.lsh.bucket;
            const bool doc = !docs || j >= docs->start[std::size_t(b * c.T + i)];
            if (doc && cj <= ci && cj >= ci - c.lsh.chunks_before)
              m[((std::size_t(b) * c.Hkv + g) * c.T + i) * c.T + j] = 1;
          }
      }
  return m;
}

// out and lse of a softmax over the masked pairs, in double.
void masked_reference(const Case& c, const Tensors<double>& t, const std::vector<char>& mask, std::vector<double>& ro,
                      std::vector<double>& rl) {
  const auto hq = host_values(t.q), hk = host_values(t.k), hv = host_values(t.v);
  ro.assign(std::size_t(c.B) * c.T * c.H * c.hd, 0.0);
  rl.assign(std::size_t(c.B) * c.H * c.T, -kInf);
  const int rep = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.hd));
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.T; ++i) {
        const int g = h / rep;
        std::vector<double> s(std::size_t(c.T), -kInf);
        double mx = -kInf;
        for (int j = 0; j < c.T; ++j) {
          if (!mask[((std::size_t(b) * c.Hkv + g) * c.T + i) * c.T + j]) continue;
          double d = 0;
          for (int e = 0; e < c.hd; ++e)
            d += hq[((std::size_t(b) * c.T + i) * c.H + h) * c.hd + e] * hk[((std::size_t(b) * c.T + j) * c.Hkv + g) * c.hd + e];
          s[std::size_t(j)] = d * scale;
          mx = std::max(mx, s[std::size_t(j)]);
        }
        double l = 0;
        for (double x : s) l += x == -kInf ? 0.0 : std::exp(x - mx);
        rl[(std::size_t(b) * c.H + h) * c.T + i] = mx + std::log(l);
        for (int j = 0; j < c.T; ++j)
          if (s[std::size_t(j)] != -kInf)
            for (int e = 0; e < c.hd; ++e)
              ro[((std::size_t(b) * c.T + i) * c.H + h) * c.hd + e] +=
                  std::exp(s[std::size_t(j)] - mx) / l * hv[((std::size_t(b) * c.T + j) * c.Hkv + g) * c.hd + e];
      }
}

}  // namespace

TEST(LshAttention, ForwardIsASoftmaxOverTheRoundsWindows) {
  for (const Case& c : kCases) {
    const Docs docs(c.B, c.T, c.cuts.empty() ? std::vector<int>{} : c.cuts);
    const Docs* dp = c.cuts.empty() ? nullptr : &docs;
    const AttentionOffsets at = dp ? docs.at() : AttentionOffsets{};
    Tensors<double> t(c, 11);
    exa::kernels::lsh_attention_forward(t.q, t.k, t.v, t.out, t.lse, c.lsh, at);
    const auto mask = lsh_mask(c, t.k, dp);
    std::size_t seen = 0, causal = 0;
    for (int b = 0; b < c.B; ++b)
      for (int g = 0; g < c.Hkv; ++g)
        for (int i = 0; i < c.T; ++i)
          for (int j = 0; j <= i; ++j) {
            seen += mask[((std::size_t(b) * c.Hkv + g) * c.T + i) * c.T + j];
            ++causal;
          }
    std::vector<double> ro, rl;
    masked_reference(c, t, mask, ro, rl);
    const double wo = max_abs_diff(host_values(t.out), ro), wl = max_abs_diff(host_values(t.lse), rl);
    std::printf("[lsh fwd %s] %s: sees %zu of %zu causal pairs; max |out err| %.2e, |lse err| %.2e\n",
                EXAMOE_TEST_BACKEND_NAME, c.name, seen, causal, wo, wl);
    EXPECT_LT(seen, causal) << c.name << ": the case should be sparse";
    if (c.lsh.local)  // the local round: every position sees its chunk of positions and chunks_before more
      for (int b = 0; b < c.B; ++b)
        for (int g = 0; g < c.Hkv; ++g)
          for (int i = 0; i < c.T; ++i)
            for (int j = std::max(0, (i / c.lsh.bucket - c.lsh.chunks_before) * c.lsh.bucket); j <= i; ++j)
              if (!dp || j >= docs.start[std::size_t(b * c.T + i)])
                EXPECT_TRUE(mask[((std::size_t(b) * c.Hkv + g) * c.T + i) * c.T + j]) << c.name << " " << i << "," << j;
    EXPECT_LE(wo, 1e-12) << c.name;
    EXPECT_LE(wl, 1e-12) << c.name;
  }
}

// One chunk over the whole sequence (bucket >= T) is causal attention.
template <class T>
void check_one_chunk_is_full(double tol) {
  for (const Case& base : kCases) {
    Case c = base;
    c.lsh.bucket = c.T + 3;
    const Docs docs(c.B, c.T, c.cuts);
    const AttentionOffsets at = c.cuts.empty() ? AttentionOffsets{} : docs.at();
    Tensors<T> a(c, 21), f(c, 21);
    V4<T> r("r", c.B, c.T, c.H, c.hd);
    fill_uniform(r, 25);
    exa::kernels::lsh_attention_forward(a.q, a.k, a.v, a.out, a.lse, c.lsh, at);
    exa::kernels::attention_forward(f.q, f.k, f.v, f.out, f.lse, {}, at);
    V4<T> dq1("dq", c.B, c.T, c.H, c.hd), dk1("dk", c.B, c.T, c.Hkv, c.hd), dv1("dv", c.B, c.T, c.Hkv, c.hd);
    V4<T> dq2("dq", c.B, c.T, c.H, c.hd), dk2("dk", c.B, c.T, c.Hkv, c.hd), dv2("dv", c.B, c.T, c.Hkv, c.hd);
    exa::kernels::lsh_attention_backward(r, a.q, a.k, a.v, a.out, a.lse, dq1, dk1, dv1, c.lsh, at);
    exa::kernels::attention_backward(r, f.q, f.k, f.v, f.out, f.lse, dq2, dk2, dv2, {}, at);
    double w = 0;
    for (const auto& [x, y] : {std::pair{host_values(a.out), host_values(f.out)}, {host_values(a.lse), host_values(f.lse)},
                               {host_values(dq1), host_values(dq2)}, {host_values(dk1), host_values(dk2)}, {host_values(dv1), host_values(dv2)}})
      w = std::max(w, max_rel_diff(x, y));
    std::printf("[lsh one chunk %s %s] %s: max |lsh - full| / max(1, |full|) over out, lse, dq, dk, dv %.2e "
                "(tol %.0e)\n",
                EXAMOE_TEST_BACKEND_NAME, sizeof(T) == 4 ? "fp32" : "fp64", c.name, w, tol);
    EXPECT_LE(w, tol) << c.name;
  }
}

TEST(LshAttention, OneChunkEqualsFullAttention) {
  check_one_chunk_is_full<double>(1e-12);
  check_one_chunk_is_full<float>(1e-6);
}

TEST(LshAttention, BackwardMatchesFiniteDifferences) {
  for (const Case& c : kCases) {
    const Docs docs(c.B, c.T, c.cuts);
    const AttentionOffsets at = c.cuts.empty() ? AttentionOffsets{} : docs.at();
    Tensors<double> t(c, 31);
    V4<double> r("r", c.B, c.T, c.H, c.hd), dq("dq", c.B, c.T, c.H, c.hd);
    V4<double> dk("dk", c.B, c.T, c.Hkv, c.hd), dv("dv", c.B, c.T, c.Hkv, c.hd);
    fill_uniform(r, 35);
    exa::kernels::lsh_attention_forward(t.q, t.k, t.v, t.out, t.lse, c.lsh, at);
    Kokkos::deep_copy(dq, std::nan(""));
    Kokkos::deep_copy(dk, std::nan(""));
    Kokkos::deep_copy(dv, std::nan(""));
    exa::kernels::lsh_attention_backward(r, t.q, t.k, t.v, t.out, t.lse, dq, dk, dv, c.lsh, at);
    auto loss = [&] {
      exa::kernels::lsh_attention_forward(t.q, t.k, t.v, t.out, t.lse, c.lsh, at);
      return dot(t.out, r);
    };
    // A perturbation of 1e-6 moves no key across a hash boundary here (the
    // buckets are piecewise constant in k, the loss smooth within them).
    const std::string tag = std::string("lsh ") + c.name;
    expect_grad_matches_fd("attention/dq " + tag, t.q, dq, loss, 1e-6, 1e-5);
    expect_grad_matches_fd("attention/dk " + tag, t.k, dk, loss, 1e-6, 1e-5);
    expect_grad_matches_fd("attention/dv " + tag, t.v, dv, loss, 1e-6, 1e-5);
  }
}

// Tensor parallelism gives each rank a contiguous block of kv heads; with
// kv_head_begin set, a rank's heads hash as the whole model's do.
TEST(LshAttention, SplitHeadsHashAsTheWholeModel) {
  const Case c = kCases[1];  // H 4, Hkv 2
  Tensors<double> whole(c, 41);
  exa::kernels::lsh_attention_forward(whole.q, whole.k, whole.v, whole.out, whole.lse, c.lsh);
  const auto ref = host_values(whole.out);
  const int hl = c.H / 2, gl = c.Hkv / 2;
  for (int part = 0; part < 2; ++part) {
    const auto hq = std::make_pair(part * hl, (part + 1) * hl), hk = std::make_pair(part * gl, (part + 1) * gl);
    V4<double> q("q", c.B, c.T, hl, c.hd), k("k", c.B, c.T, gl, c.hd), v("v", c.B, c.T, gl, c.hd);
    V4<double> out("out", c.B, c.T, hl, c.hd);
    V3<double> lse("lse", c.B, hl, c.T);
    Kokkos::deep_copy(q, Kokkos::subview(whole.q, Kokkos::ALL, Kokkos::ALL, hq, Kokkos::ALL));
    Kokkos::deep_copy(k, Kokkos::subview(whole.k, Kokkos::ALL, Kokkos::ALL, hk, Kokkos::ALL));
    Kokkos::deep_copy(v, Kokkos::subview(whole.v, Kokkos::ALL, Kokkos::ALL, hk, Kokkos::ALL));
    LshConfig cfg = c.lsh;
    cfg.kv_head_begin = part * gl;
    exa::kernels::lsh_attention_forward(q, k, v, out, lse, cfg);
    const auto got = host_values(out);
    double w = 0;
    for (int b = 0; b < c.B; ++b)
      for (int i = 0; i < c.T; ++i)
        for (int h = 0; h < hl; ++h)
          for (int e = 0; e < c.hd; ++e)
            w = std::max(w, std::fabs(got[((std::size_t(b) * c.T + i) * hl + h) * c.hd + e] -
                                      ref[((std::size_t(b) * c.T + i) * c.H + part * hl + h) * c.hd + e]));
    EXPECT_EQ(w, 0.0) << "rank " << part << " of 2";
    // Without the offset rank 1 would draw rank 0's rotations.
    if (part == 1) {
      cfg.kv_head_begin = 0;
      exa::kernels::lsh_attention_forward(q, k, v, out, lse, cfg);
      EXPECT_NE(max_abs_diff(host_values(out), got), 0.0) << "the rotations do not depend on the kv head";
    }
  }
}
