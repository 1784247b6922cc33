// Attention with explicit query/key positions (kernels/attention.hpp): key
// blocks of another length and position than the queries, rows that see no
// key, both implementations (the host gemm path and the team kernels), and
// the decomposition that ring attention relies on (per-block forwards merged
// by log-sum-exp; per-block backwards with the merged lse and out).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "attention_paths.hpp"
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
  AttentionOffsets pos() const { return {q_offset, k_offset}; }
};

// Cases of every kind of mask; with tiles {4, 3, 4} they have fully visible,
// partially masked and fully masked query and key tiles.
const Case kCases[] = {
    {"full block (q after all keys)", 2, 7, 9, 4, 2, 4, 20, 0},
    {"partial block, q after k", 2, 10, 12, 4, 2, 4, 20, 15},
    {"masked rows, q before k", 2, 10, 8, 4, 2, 4, 0, 4},
    {"Tk > T", 1, 6, 14, 4, 2, 4, 8, 0},
    {"keys no query sees, MQA", 1, 9, 5, 3, 1, 4, 0, 6},
    {"same position, Tk != T", 1, 9, 6, 2, 2, 5, 11, 11},
};
const AttentionTiles kTiles{4, 3, 4};

using Path = AttentionPath;

// |a - b| / max(1, |b|) elementwise, but a NaN anywhere, or an infinity
// on one side only, counts as an infinite difference (the harness's
// max_rel_diff lets NaN through).
template <class A, class B>
double strict_diff(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  EXPECT_EQ(ha.span(), hb.span());
  double w = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) {
    const double x = double(ha.data()[i]), y = double(hb.data()[i]);
    if (std::isnan(x) || std::isnan(y)) return kInf;
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return kInf;
      continue;
    }
    w = std::max(w, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  return w;
}

template <class A>
bool all_finite(const A& a) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  for (std::size_t i = 0; i < h.span(); ++i)
    if (!std::isfinite(double(h.data()[i]))) return false;
  return true;
}

template <class A>
bool all_zero(const A& a) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  for (std::size_t i = 0; i < h.span(); ++i)
    if (double(h.data()[i]) != 0.0) return false;
  return true;
}

// Full-softmax attention in double with the positions' mask: out rows of
// queries that see no key are 0 and their lse is -inf.
template <class Q, class K, class V>
void reference_forward(const Case& c, const Q& q, const K& k, const V& v, std::vector<double>& out,
                       std::vector<double>& lse) {
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  out.assign(static_cast<std::size_t>(c.B) * c.T * c.H * c.hd, 0.0);
  lse.assign(static_cast<std::size_t>(c.B) * c.H * c.T, -kInf);
  const int rep = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.hd));
  std::vector<double> s(c.Tk);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.T; ++i) {
        const int g = h / rep;
        int n = 0;  // visible keys: q_offset + i >= k_offset + j
        while (n < c.Tk && c.q_offset + i >= c.k_offset + n) ++n;
        if (n == 0) continue;
        double m = -kInf;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int e = 0; e < c.hd; ++e) d += double(hq(b, i, h, e)) * double(hk(b, j, g, e));
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = 0; j < n; ++j) l += std::exp(s[j] - m);
        lse[(static_cast<std::size_t>(b) * c.H + h) * c.T + i] = m + std::log(l);
        for (int j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - m) / l;
          for (int e = 0; e < c.hd; ++e)
            out[((static_cast<std::size_t>(b) * c.T + i) * c.H + h) * c.hd + e] += p * double(hv(b, j, g, e));
        }
      }
}

double max_err(const std::vector<double>& ref, const double* got_first, std::size_t n) {
  double w = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = got_first[i], y = ref[i];
    if (std::isnan(x) || ((std::isinf(x) || std::isinf(y)) && x != y)) return kInf;
    if (!std::isinf(y)) w = std::max(w, std::fabs(x - y));
  }
  return w;
}

template <class T>
void check_forward(const Case& c, Path p, double tol) {
  V4<T> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
  V4<T> out("out", c.B, c.T, c.H, c.hd);
  V3<T> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 41, -2.0, 2.0);
  fill_uniform(k, 42, -2.0, 2.0);
  fill_uniform(v, 43);
  Kokkos::deep_copy(out, T(std::nan("")));  // every element must be written, masked rows included
  Kokkos::deep_copy(lse, T(std::nan("")));
  forward(p, q, k, v, out, lse, kTiles, c.pos());
  std::vector<double> ro, rl;
  reference_forward(c, q, k, v, ro, rl);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  std::vector<double> go(ho.data(), ho.data() + ho.span()), gl(hl.data(), hl.data() + hl.span());
  const double wo = max_err(ro, go.data(), go.size()), wl = max_err(rl, gl.data(), gl.size());
  std::printf("[fwd %s %s %s] %s: max |out err| %.3e, max |lse err| %.3e, tol %.1e\n", EXAMOE_TEST_BACKEND_NAME,
              path_name(p), sizeof(T) == 4 ? "fp32" : "fp64", c.name, wo, wl, tol);
  EXPECT_LE(wo, tol) << c.name;
  EXPECT_LE(wl, tol) << c.name;
}

void check_backward_fd(const Case& c, Path p) {
  using T = double;
  V4<T> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
  V4<T> out("out", c.B, c.T, c.H, c.hd), r("r", c.B, c.T, c.H, c.hd);
  V4<T> dq("dq", c.B, c.T, c.H, c.hd), dk("dk", c.B, c.Tk, c.Hkv, c.hd), dv("dv", c.B, c.Tk, c.Hkv, c.hd);
  V3<T> lse("lse", c.B, c.H, c.T);
  fill_uniform(q, 51, -1.5, 1.5);
  fill_uniform(k, 52, -1.5, 1.5);
  fill_uniform(v, 53);
  fill_uniform(r, 54);
  forward(p, q, k, v, out, lse, kTiles, c.pos());
  Kokkos::deep_copy(dq, T(std::nan("")));
  Kokkos::deep_copy(dk, T(std::nan("")));
  Kokkos::deep_copy(dv, T(std::nan("")));
  backward(p, r, q, k, v, out, lse, dq, dk, dv, kTiles, c.pos());
  EXPECT_TRUE(all_finite(dq) && all_finite(dk) && all_finite(dv)) << c.name << ": a gradient is not finite";
  auto loss = [&] {
    forward(p, q, k, v, out, lse, kTiles, c.pos());
    return dot(out, r);
  };
  const std::string tag = std::string(path_name(p)) + " " + c.name;
  expect_grad_matches_fd("attention/dq " + tag, q, dq, loss, 1e-6, 1e-5);
  expect_grad_matches_fd("attention/dk " + tag, k, dk, loss, 1e-6, 1e-5);
  expect_grad_matches_fd("attention/dv " + tag, v, dv, loss, 1e-6, 1e-5);
}

}  // namespace

TEST(AttentionOffsets, ForwardMatchesMaskedFullSoftmax) {
  for (Path p : {Path::Dispatch, Path::Team})
    for (const Case& c : kCases) {
      check_forward<double>(c, p, 1e-12);
      check_forward<float>(c, p, 2e-6);
    }
}

TEST(AttentionOffsets, BackwardMatchesFiniteDifferences) {
  for (Path p : {Path::Dispatch, Path::Team})
    for (const Case& c : kCases) check_backward_fd(c, p);
}

// Only q_offset - k_offset matters: shifting both changes no bit.
TEST(AttentionOffsets, OnlyTheShiftMatters) {
  const Case c{"", 2, 11, 8, 4, 2, 4, 0, 0};
  V4<float> q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
  V4<float> r("r", c.B, c.T, c.H, c.hd);
  fill_uniform(q, 61);
  fill_uniform(k, 62);
  fill_uniform(v, 63);
  fill_uniform(r, 64);
  for (Path p : {Path::Dispatch, Path::Team}) {
    auto run = [&](AttentionOffsets pos) {
      struct {
        V4<float> out, dq, dk, dv;
        V3<float> lse;
      } o{V4<float>("out", c.B, c.T, c.H, c.hd), V4<float>("dq", c.B, c.T, c.H, c.hd),
          V4<float>("dk", c.B, c.Tk, c.Hkv, c.hd), V4<float>("dv", c.B, c.Tk, c.Hkv, c.hd),
          V3<float>("lse", c.B, c.H, c.T)};
      forward(p, q, k, v, o.out, o.lse, kTiles, pos);
      backward(p, r, q, k, v, o.out, o.lse, o.dq, o.dk, o.dv, kTiles, pos);
      return o;
    };
    const auto a = run({3, 5}), b = run({1003, 1005});
    EXPECT_EQ(strict_diff(a.out, b.out), 0.0) << path_name(p);
    EXPECT_EQ(strict_diff(a.lse, b.lse), 0.0) << path_name(p);
    EXPECT_EQ(strict_diff(a.dq, b.dq), 0.0) << path_name(p);
    EXPECT_EQ(strict_diff(a.dk, b.dk), 0.0) << path_name(p);
    EXPECT_EQ(strict_diff(a.dv, b.dv), 0.0) << path_name(p);
  }
}

// Blocks where nothing or no one is visible: no keys (Tk = 0), no queries
// (T = 0), and keys all in every query's future.
TEST(AttentionOffsets, EmptyAndFullyMaskedBlocks) {
  struct Empty {
    const char* name;
    int T, Tk;
    AttentionOffsets pos;
  };
  const Empty cases[] = {{"Tk = 0", 5, 0, {0, 0}}, {"T = 0", 0, 5, {0, 0}}, {"keys in the future", 5, 6, {0, 10}}};
  const int B = 2, H = 4, Hkv = 2, hd = 4;
  for (Path p : {Path::Dispatch, Path::Team})
    for (const Empty& c : cases) {
      V4<double> q("q", B, c.T, H, hd), k("k", B, c.Tk, Hkv, hd), v("v", B, c.Tk, Hkv, hd);
      V4<double> out("out", B, c.T, H, hd), r("r", B, c.T, H, hd), dq("dq", B, c.T, H, hd);
      V4<double> dk("dk", B, c.Tk, Hkv, hd), dv("dv", B, c.Tk, Hkv, hd);
      V3<double> lse("lse", B, H, c.T);
      fill_uniform(q, 71);
      fill_uniform(k, 72);
      fill_uniform(v, 73);
      fill_uniform(r, 74);
      Kokkos::deep_copy(out, std::nan(""));
      Kokkos::deep_copy(lse, std::nan(""));
      forward(p, q, k, v, out, lse, kTiles, c.pos);
      Kokkos::deep_copy(dq, std::nan(""));
      Kokkos::deep_copy(dk, 7.0);  // stale gradients must be overwritten
      Kokkos::deep_copy(dv, 7.0);
      backward(p, r, q, k, v, out, lse, dq, dk, dv, kTiles, c.pos);
      auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
      bool lse_ok = true;
      for (std::size_t i = 0; i < hl.span(); ++i) lse_ok = lse_ok && hl.data()[i] == -kInf;
      const std::string tag = std::string(path_name(p)) + " " + c.name;
      EXPECT_TRUE(all_zero(out)) << tag << ": out";
      EXPECT_TRUE(lse_ok) << tag << ": lse must be -inf";
      EXPECT_TRUE(all_zero(dq)) << tag << ": dq";
      EXPECT_TRUE(all_zero(dk)) << tag << ": dk";
      EXPECT_TRUE(all_zero(dv)) << tag << ": dv";
    }
}

TEST(AttentionOffsets, ShapeErrorsNameTheShapes) {
  V4<double> q("q", 1, 4, 2, 4), k("k", 1, 6, 1, 4), v("v", 1, 5, 1, 4), out("out", 1, 4, 2, 4);
  V3<double> lse("lse", 1, 2, 4);
  try {
    exa::kernels::attention_forward(q, k, v, out, lse, kTiles, AttentionOffsets{2, 0});
    ADD_FAILURE() << "k and v of different lengths were accepted";
  } catch (const exa::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("k [1,6,1,4]"), std::string::npos) << what;
    EXPECT_NE(what.find("v [1,5,1,4]"), std::string::npos) << what;
  }
}

// Both implementations on host views agree, masked rows and keys included.
template <class T>
void check_paths_agree(const Case& c, AttentionTiles tiles, double tol) {
  using H4 = V4<T, Kokkos::HostSpace>;
  using H3 = V3<T, Kokkos::HostSpace>;
  H4 q("q", c.B, c.T, c.H, c.hd), k("k", c.B, c.Tk, c.Hkv, c.hd), v("v", c.B, c.Tk, c.Hkv, c.hd);
  H4 r("r", c.B, c.T, c.H, c.hd);
  H4 o1("o1", c.B, c.T, c.H, c.hd), o2("o2", c.B, c.T, c.H, c.hd);
  H3 l1("l1", c.B, c.H, c.T), l2("l2", c.B, c.H, c.T);
  H4 dq1("dq1", c.B, c.T, c.H, c.hd), dk1("dk1", c.B, c.Tk, c.Hkv, c.hd), dv1("dv1", c.B, c.Tk, c.Hkv, c.hd);
  H4 dq2("dq2", c.B, c.T, c.H, c.hd), dk2("dk2", c.B, c.Tk, c.Hkv, c.hd), dv2("dv2", c.B, c.Tk, c.Hkv, c.hd);
  fill_uniform(q, 81, -2.0, 2.0);
  fill_uniform(k, 82, -2.0, 2.0);
  fill_uniform(v, 83);
  fill_uniform(r, 84);
  ad::forward_team(q, k, v, o1, l1, tiles, c.pos());
  ad::forward_host(q, k, v, o2, l2, tiles, c.pos());
  ad::backward_team(r, q, k, v, o1, l1, dq1, dk1, dv1, tiles, c.pos());
  ad::backward_host(r, q, k, v, o2, l2, dq2, dk2, dv2, tiles, c.pos());
  const double e[5] = {strict_diff(o2, o1), strict_diff(l2, l1), strict_diff(dq2, dq1), strict_diff(dk2, dk1),
                       strict_diff(dv2, dv1)};
  std::printf("[paths %s] %s, tiles %dx%d host %d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e, tol %.1e\n",
              sizeof(T) == 4 ? "fp32" : "fp64", c.name, tiles.block_q, tiles.block_k, tiles.host_block_q, e[0],
              e[1], e[2], e[3], e[4], tol);
  for (double x : e) EXPECT_LE(x, tol) << c.name;
}

TEST(AttentionOffsets, HostAndTeamPathsAgree) {
  for (const Case& c : kCases) {
    check_paths_agree<double>(c, kTiles, 1e-12);
    check_paths_agree<double>(c, {}, 1e-12);  // one tile each
    check_paths_agree<float>(c, {2, 5, 3}, 2e-5);
  }
  check_paths_agree<double>({"long, q after k", 1, 70, 90, 4, 2, 16, 100, 45}, {}, 1e-12);
  check_paths_agree<float>({"long, masked rows", 1, 77, 50, 4, 1, 32, 0, 30}, {16, 16, 32}, 2e-5);
}

// Ring attention's decomposition: queries at q_offset over all keys [0, Tk)
// equal the log-sum-exp merge of the attention over key pieces [s, e) (each
// at k_offset s); the backward of each piece, called with the merged lse and
// out, gives dq contributions that sum to the full dq and the full dk, dv of
// the piece's keys.
namespace {

void check_ring(Path p, const char* label, int B, int T, index_t q_offset, int H, int Hkv, int hd,
                const std::vector<int>& cuts, AttentionTiles tiles) {
  using D = V4<double>;
  const int Tk = cuts.back();
  D q("q", B, T, H, hd), k("k", B, Tk, Hkv, hd), v("v", B, Tk, Hkv, hd), r("r", B, T, H, hd);
  fill_uniform(q, 91, -2.0, 2.0);
  fill_uniform(k, 92, -2.0, 2.0);
  fill_uniform(v, 93);
  fill_uniform(r, 94);
  D out("out", B, T, H, hd), dq("dq", B, T, H, hd), dk("dk", B, Tk, Hkv, hd), dv("dv", B, Tk, Hkv, hd);
  V3<double> lse("lse", B, H, T);
  forward(p, q, k, v, out, lse, tiles, {q_offset, 0});
  backward(p, r, q, k, v, out, lse, dq, dk, dv, tiles, {q_offset, 0});

  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto hdk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk);
  auto hdv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
  const std::size_t nq = static_cast<std::size_t>(B) * T * H * hd;
  // Online softmax over the pieces: running max m, sum l, unnormalised out.
  std::vector<double> m(static_cast<std::size_t>(B) * H * T, -kInf), l(m.size(), 0.0), acc(nq, 0.0);
  struct Piece {
    D k, v;
    int s, n;
  };
  std::vector<Piece> pieces;
  for (std::size_t pi = 0; pi + 1 < cuts.size(); ++pi) {
    const int s = cuts[pi], n = cuts[pi + 1] - s;
    Piece pc{D("kp", B, n, Hkv, hd), D("vp", B, n, Hkv, hd), s, n};
    auto hkp = Kokkos::create_mirror_view(pc.k);
    auto hvp = Kokkos::create_mirror_view(pc.v);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < n; ++j)
        for (int g = 0; g < Hkv; ++g)
          for (int e = 0; e < hd; ++e) {
            hkp(b, j, g, e) = hk(b, s + j, g, e);
            hvp(b, j, g, e) = hv(b, s + j, g, e);
          }
    Kokkos::deep_copy(pc.k, hkp);
    Kokkos::deep_copy(pc.v, hvp);
    D po("po", B, T, H, hd);
    V3<double> pl("pl", B, H, T);
    forward(p, q, pc.k, pc.v, po, pl, tiles, {q_offset, s});
    auto hpo = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), po);
    auto hpl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pl);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          const std::size_t row = (static_cast<std::size_t>(b) * H + h) * T + i;
          const double lp = hpl(b, h, i);
          if (lp == -kInf) continue;  // the row sees no key of this piece (its out is 0)
          const double mn = std::max(m[row], lp);
          const double a_old = std::exp(m[row] - mn), a_new = std::exp(lp - mn);
          l[row] = l[row] * a_old + a_new;
          for (int e = 0; e < hd; ++e) {
            double& o = acc[((static_cast<std::size_t>(b) * T + i) * H + h) * hd + e];
            o = o * a_old + a_new * hpo(b, i, h, e);
          }
          m[row] = mn;
        }
    pieces.push_back(pc);
  }
  D mout("mout", B, T, H, hd);
  V3<double> mlse("mlse", B, H, T);
  {
    auto ho = Kokkos::create_mirror_view(mout);
    auto hl = Kokkos::create_mirror_view(mlse);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i) {
          const std::size_t row = (static_cast<std::size_t>(b) * H + h) * T + i;
          hl(b, h, i) = m[row] == -kInf ? -kInf : m[row] + std::log(l[row]);
          for (int e = 0; e < hd; ++e)
            ho(b, i, h, e) = m[row] == -kInf ? 0.0 : acc[((static_cast<std::size_t>(b) * T + i) * H + h) * hd + e] / l[row];
        }
    Kokkos::deep_copy(mout, ho);
    Kokkos::deep_copy(mlse, hl);
  }
  const double e_out = strict_diff(mout, out), e_lse = strict_diff(mlse, lse);

  // Backward per piece with the merged lse and out.
  std::vector<double> dq_sum(nq, 0.0);
  double e_dk = 0, e_dv = 0;
  for (const Piece& pc : pieces) {
    D dqp("dqp", B, T, H, hd), dkp("dkp", B, pc.n, Hkv, hd), dvp("dvp", B, pc.n, Hkv, hd);
    backward(p, r, q, pc.k, pc.v, mout, mlse, dqp, dkp, dvp, tiles, {q_offset, pc.s});
    EXPECT_TRUE(all_finite(dqp) && all_finite(dkp) && all_finite(dvp)) << label << ": piece at " << pc.s;
    auto hdqp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dqp);
    for (std::size_t idx = 0; idx < nq; ++idx) dq_sum[idx] += hdqp.data()[idx];
    auto hdkp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dkp);
    auto hdvp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dvp);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < pc.n; ++j)
        for (int g = 0; g < Hkv; ++g)
          for (int e = 0; e < hd; ++e) {
            const double fk = hdk(b, pc.s + j, g, e), fv = hdv(b, pc.s + j, g, e);
            e_dk = std::max(e_dk, std::fabs(hdkp(b, j, g, e) - fk) / std::max(1.0, std::fabs(fk)));
            e_dv = std::max(e_dv, std::fabs(hdvp(b, j, g, e) - fv) / std::max(1.0, std::fabs(fv)));
          }
  }
  double e_dq = 0;
  {
    auto hdq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dq);
    for (std::size_t idx = 0; idx < nq; ++idx) {
      const double f = hdq.data()[idx];
      e_dq = std::max(e_dq, std::fabs(dq_sum[idx] - f) / std::max(1.0, std::fabs(f)));
    }
  }
  std::printf("[ring %s %s] %s: %zu pieces: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", EXAMOE_TEST_BACKEND_NAME,
              path_name(p), label, pieces.size(), e_out, e_lse, e_dq, e_dk, e_dv);
  for (double x : {e_out, e_lse, e_dq, e_dk, e_dv}) EXPECT_LE(x, 1e-12) << label;
}

}  // namespace

TEST(AttentionOffsets, TwoKeyBlocksMergeToTheFullAttention) {
  for (Path p : {Path::Dispatch, Path::Team}) {
    check_ring(p, "T 12, GQA 4/2, halves", 2, 12, 0, 4, 2, 4, {0, 6, 12}, kTiles);
    check_ring(p, "T 12, GQA 4/2, halves, default tiles", 2, 12, 0, 4, 2, 4, {0, 6, 12}, {});
  }
}

TEST(AttentionOffsets, UnevenKeyBlocksMergeToTheFullAttention) {
  // Queries at positions 6..13 over keys 0..13 in three pieces: the last
  // piece is in the future of the first three query rows.
  for (Path p : {Path::Dispatch, Path::Team})
    check_ring(p, "T 8 at 6, GQA 6/2, three pieces", 1, 8, 6, 6, 2, 4, {0, 5, 9, 14}, kTiles);
}
