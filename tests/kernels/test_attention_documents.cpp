// Attention over packed sequences (kernels/attention.hpp, AttentionOffsets'
// documents): a query sees only the earlier keys of its own document. The
// forward against a masked full softmax in double, the backward against
// finite differences, the two implementations against each other, the
// packed sequence against its documents run one by one, and key blocks at
// other positions (ring attention's pairs) cutting through documents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "attention_paths.hpp"
#include "packed_documents.hpp"
#include "kernels/attention.hpp"

using namespace exa::test;
using exa::index_t;
using exa::kernels::AttentionOffsets;
using exa::kernels::AttentionTiles;
namespace ad = exa::kernels::attention_detail;

namespace {

template <class T, class D = TestDevice>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight, D>;
template <class T, class D = TestDevice>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, D>;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  const char* name;
  int B, T, Tk, H, Hkv, hd;
  index_t q_offset, k_offset;
  std::vector<int> cuts;
  int P() const { return int(std::max(q_offset + T, k_offset + Tk)); }
};

// Short and long documents, documents shorter than a tile, a document
// boundary on a tile edge, and blocks at other positions (a ring's pairs).
const std::vector<Case> kCases = {
    {"many short documents", 2, 17, 17, 4, 2, 4, 0, 0, {3, 4, 9, 12}},
    {"one long and one short", 1, 20, 20, 2, 1, 8, 0, 0, {16}},
    {"boundary on a tile edge", 2, 12, 12, 4, 4, 4, 0, 0, {4, 8}},
    {"q after k, documents across", 2, 10, 12, 4, 2, 4, 20, 8, {11, 14, 23, 26}},
    {"keys of other documents only", 1, 6, 6, 2, 1, 4, 12, 0, {7}},
};
const AttentionTiles kTiles{4, 3, 4};

using Path = AttentionPath;


// max |got - ref|, infinite where one side is NaN or an infinity the other lacks.
double max_err(const std::vector<double>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double x = got[i], y = ref[i];
    if (std::isnan(x) || ((std::isinf(x) || std::isinf(y)) && x != y)) return kInf;
    if (!std::isinf(y)) w = std::max(w, std::fabs(x - y));
  }
  return w;
}

template <class T>
void check_forward(const Case& c, Path p, double tol) {
  const Docs docs(c.B, c.P(), c.cuts);
  V4<T> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
  V4<T> out("out", c.B, c.T, c.H, c.hd);
  V3<T> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 41, -2.0, 2.0);
  fill_uniform(k, 42, -2.0, 2.0);
  fill_uniform(v, 43);
  Kokkos::deep_copy(out, T(std::nan("")));
  Kokkos::deep_copy(lse, T(std::nan("")));
  forward(p, q, k, v, out, lse, kTiles, docs.at(c.q_offset, c.k_offset));
  const auto hq = host_values(q), hk = host_values(k), hv = host_values(v);
  std::vector<double> ro(std::size_t(c.B) * c.T * c.H * c.hd, 0.0), rl(std::size_t(c.B) * c.H * c.T, -kInf);
  const int rep = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.hd));
  auto at4 = [](const std::vector<double>& x, int n1, int n2, int n3, int a, int b, int cc, int d) {
    return x[((std::size_t(a) * n1 + b) * n2 + cc) * n3 + d];
  };
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.T; ++i) {
        const int g = h / rep;
        std::vector<double> s(std::size_t(c.Tk), -kInf);
        double m = -kInf;
        for (int j = 0; j < c.Tk; ++j) {
          if (!docs.visible(b, c.q_offset + i, c.k_offset + j)) continue;
          double d = 0;
          for (int e = 0; e < c.hd; ++e) d += at4(hq, c.T, c.H, c.hd, b, i, h, e) * at4(hk, c.Tk, c.Hkv, c.hd, b, j, g, e);
          s[std::size_t(j)] = d * scale;
          m = std::max(m, s[std::size_t(j)]);
        }
        if (m == -kInf) continue;
        double l = 0;
        for (int j = 0; j < c.Tk; ++j) l += s[std::size_t(j)] == -kInf ? 0.0 : std::exp(s[std::size_t(j)] - m);
        rl[(std::size_t(b) * c.H + h) * c.T + i] = m + std::log(l);
        for (int j = 0; j < c.Tk; ++j) {
          if (s[std::size_t(j)] == -kInf) continue;
          const double pr = std::exp(s[std::size_t(j)] - m) / l;
          for (int e = 0; e < c.hd; ++e)
            ro[((std::size_t(b) * c.T + i) * c.H + h) * c.hd + e] += pr * at4(hv, c.Tk, c.Hkv, c.hd, b, j, g, e);
        }
      }
  const double wo = max_err(host_values(out), ro), wl = max_err(host_values(lse), rl);
  std::printf("[docs fwd %s %s %s] %s: max |out err| %.3e, max |lse err| %.3e, tol %.1e\n",
              EXAMOE_TEST_BACKEND_NAME, path_name(p), sizeof(T) == 4 ? "fp32" : "fp64", c.name, wo, wl, tol);
  EXPECT_LE(wo, tol) << c.name;
  EXPECT_LE(wl, tol) << c.name;
}

}  // namespace

TEST(AttentionDocuments, ForwardMatchesMaskedFullSoftmax) {
  for (Path p : {Path::Dispatch, Path::Team})
    for (const Case& c : kCases) {
      check_forward<double>(c, p, 1e-12);
      check_forward<float>(c, p, 2e-6);
    }
}

TEST(AttentionDocuments, BackwardMatchesFiniteDifferences) {
  for (Path p : {Path::Dispatch, Path::Team})
    for (const Case& c : kCases) {
      const Docs docs(c.B, c.P(), c.cuts);
      const AttentionOffsets at = docs.at(c.q_offset, c.k_offset);
      V4<double> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
      V4<double> out("out", c.B, c.T, c.H, c.hd), r("r", c.B, c.T, c.H, c.hd);
      V4<double> dq("dq", c.B, c.T, c.H, c.hd), dk("dk", c.B, c.Tk, c.Hkv, c.hd), dv("dv", c.B, c.Tk, c.Hkv, c.hd);
      V3<double> lse("lse", c.B, c.H, c.T);
      fill_uniform(q, 51, -1.5, 1.5);
      fill_uniform(k, 52, -1.5, 1.5);
      fill_uniform(v, 53);
      fill_uniform(r, 54);
      forward(p, q, k, v, out, lse, kTiles, at);
      Kokkos::deep_copy(dq, std::nan(""));
      Kokkos::deep_copy(dk, std::nan(""));
      Kokkos::deep_copy(dv, std::nan(""));
      backward(p, r, q, k, v, out, lse, dq, dk, dv, kTiles, at);
      auto loss = [&] {
        forward(p, q, k, v, out, lse, kTiles, at);
        return dot(out, r);
      };
      const std::string tag = std::string("docs ") + path_name(p) + " " + c.name;
      expect_grad_matches_fd("attention/dq " + tag, q, dq, loss, 1e-6, 1e-5);
      expect_grad_matches_fd("attention/dk " + tag, k, dk, loss, 1e-6, 1e-5);
      expect_grad_matches_fd("attention/dv " + tag, v, dv, loss, 1e-6, 1e-5);
    }
}

// The gemm path and the team kernels agree on host views, with tiles that
// cut documents in many ways.
TEST(AttentionDocuments, HostAndTeamPathsAgree) {
  using H4 = V4<double, Kokkos::HostSpace>;
  using H3 = V3<double, Kokkos::HostSpace>;
  for (const Case& c : kCases)
    for (const AttentionTiles tiles : {kTiles, AttentionTiles{}, AttentionTiles{2, 5, 3}}) {
      const Docs docs(c.B, c.P(), c.cuts);
      // Host views: the documents' host copies.
      const AttentionOffsets at{c.q_offset, c.k_offset, docs.start.data(), docs.end.data(), c.P()};
      H4 q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
      H4 r("r", c.B, c.T, c.H, c.hd), o1("o1", c.B, c.T, c.H, c.hd), o2("o2", c.B, c.T, c.H, c.hd);
      H3 l1("l1", c.B, c.H, c.T), l2("l2", c.B, c.H, c.T);
      H4 dq1("dq1", c.B, c.T, c.H, c.hd), dk1("dk1", c.B, c.Tk, c.Hkv, c.hd), dv1("dv1", c.B, c.Tk, c.Hkv, c.hd);
      H4 dq2("dq2", c.B, c.T, c.H, c.hd), dk2("dk2", c.B, c.Tk, c.Hkv, c.hd), dv2("dv2", c.B, c.Tk, c.Hkv, c.hd);
      fill_uniform(q, 81, -2.0, 2.0);
      fill_uniform(k, 82, -2.0, 2.0);
      fill_uniform(v, 83);
      fill_uniform(r, 84);
      ad::forward_team(q, k, v, o1, l1, tiles, at);
      ad::forward_host(q, k, v, o2, l2, tiles, at);
      ad::backward_team(r, q, k, v, o1, l1, dq1, dk1, dv1, tiles, at);
      ad::backward_host(r, q, k, v, o2, l2, dq2, dk2, dv2, tiles, at);
      const double e[5] = {max_err(host_values(o2), host_values(o1)), max_err(host_values(l2), host_values(l1)), max_err(host_values(dq2), host_values(dq1)),
                           max_err(host_values(dk2), host_values(dk1)), max_err(host_values(dv2), host_values(dv1))};
      for (double x : e) EXPECT_LE(x, 1e-12) << c.name << " tiles " << tiles.block_q << "x" << tiles.block_k;
    }
}

// A packed sequence gives each document what the document alone gives:
// its rows' out, lse and gradients equal those of the document run as a
// sequence of its own (at position 0, no documents), bit for bit up to
// the summation order of the tiles (1e-12 in double).
TEST(AttentionDocuments, PackedEqualsDocumentsOneByOne) {
  const int T = 23, H = 4, Hkv = 2, hd = 8;
  const std::vector<int> cuts{5, 6, 13, 20};
  const Docs docs(1, T, cuts);
  for (Path p : {Path::Dispatch, Path::Team}) {
    V4<double> q("q", 1, T, H, hd), k("k", 1, T, Hkv, hd), v("v", 1, T, Hkv, hd), r("r", 1, T, H, hd);
    V4<double> out("out", 1, T, H, hd), dq("dq", 1, T, H, hd), dk("dk", 1, T, Hkv, hd), dv("dv", 1, T, Hkv, hd);
    V3<double> lse("lse", 1, H, T);
    fill_uniform(q, 91, -2.0, 2.0);
    fill_uniform(k, 92, -2.0, 2.0);
    fill_uniform(v, 93);
    fill_uniform(r, 94);
    forward(p, q, k, v, out, lse, kTiles, docs.at(0, 0));
    backward(p, r, q, k, v, out, lse, dq, dk, dv, kTiles, docs.at(0, 0));
    const auto packed = std::vector<std::vector<double>>{host_values(out), host_values(lse), host_values(dq), host_values(dk), host_values(dv)};
    std::vector<int> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(T);
    double worst = 0;
    for (std::size_t d = 0; d + 1 < bounds.size(); ++d) {
      const int a = bounds[d], n = bounds[d + 1] - a;
      auto rows = [&](const V4<double>& x) {
        return Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(a, a + n), Kokkos::ALL, Kokkos::ALL);
      };
      V4<double> qd("qd", 1, n, H, hd), kd("kd", 1, n, Hkv, hd), vd("vd", 1, n, Hkv, hd), rd("rd", 1, n, H, hd);
      Kokkos::deep_copy(qd, rows(q));
      Kokkos::deep_copy(kd, rows(k));
      Kokkos::deep_copy(vd, rows(v));
      Kokkos::deep_copy(rd, rows(r));
      V4<double> od("od", 1, n, H, hd), dqd("dqd", 1, n, H, hd), dkd("dkd", 1, n, Hkv, hd), dvd("dvd", 1, n, Hkv, hd);
      V3<double> ld("ld", 1, H, n);
      forward(p, qd, kd, vd, od, ld, kTiles, {});
      backward(p, rd, qd, kd, vd, od, ld, dqd, dkd, dvd, kTiles, {});
      const auto ho = host_values(od), hl = host_values(ld), hdq = host_values(dqd), hdk = host_values(dkd), hdv = host_values(dvd);
      for (int i = 0; i < n; ++i)
        for (int h = 0; h < H; ++h) {
          worst = std::max(worst, std::fabs(hl[std::size_t(h * n + i)] - packed[1][std::size_t(h * T + a + i)]));
          for (int e = 0; e < hd; ++e) {
            const std::size_t one = (std::size_t(i) * H + h) * hd + e, all = (std::size_t(a + i) * H + h) * hd + e;
            worst = std::max(worst, std::fabs(ho[one] - packed[0][all]));
            worst = std::max(worst, std::fabs(hdq[one] - packed[2][all]));
          }
        }
      for (int j = 0; j < n; ++j)
        for (int g = 0; g < Hkv; ++g)
          for (int e = 0; e < hd; ++e) {
            const std::size_t one = (std::size_t(j) * Hkv + g) * hd + e, all = (std::size_t(a + j) * Hkv + g) * hd + e;
            worst = std::max(worst, std::fabs(hdk[one] - packed[3][all]));
            worst = std::max(worst, std::fabs(hdv[one] - packed[4][all]));
          }
    }
    std::printf("[docs one-by-one %s %s] worst |packed - alone| %.3e\n", EXAMOE_TEST_BACKEND_NAME, path_name(p),
                worst);
    EXPECT_LE(worst, 1e-12) << path_name(p);
  }
}
