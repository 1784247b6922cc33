// Ring attention (parallel/context/ring_attention.hpp) against the
// single-rank attention kernel on the same q, k, v in double precision: the
// world is the Cp group, every rank takes its zigzag rows of the global
// tensors, and its out, lse, dq, dk, dv must equal those rows of the
// single-rank results (max error <= 1e-6 of the largest reference value).
// Then finite differences of the ring's own forward (summed over the ranks)
// check the gradients of the log-sum-exp merge. Multi-head and GQA, partial
// kernel tiles; run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "harness/splitmix_noise.hpp"
#include "kernels/attention.hpp"
#include "parallel/context/ring_attention.hpp"
#include "parallel/context/zigzag.hpp"

namespace {

using exa::index_t;
using A4 = Kokkos::View<double****, exa::Layout, exa::Device>;
using U4 = Kokkos::View<double****, exa::Layout, exa::Device, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using L3 = Kokkos::View<double***, exa::Layout, exa::Device>;
using exa::parallel::context::RingAttention;
using exa::parallel::context::Zigzag;

using exa::test::splitmix_noise;

struct Case {
  int B, c, H, Hkv, hd;
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Host copy of a [B,T,h,hd] tensor as a flat vector (row-major).
std::vector<double> host(const A4& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.span());
}
A4 device(const std::vector<double>& x, int B, int T, int h, int hd) {
  A4 v("t", B, T, h, hd);
  auto hv = Kokkos::create_mirror_view(v);
  std::copy(x.begin(), x.end(), hv.data());
  Kokkos::deep_copy(v, hv);
  return v;
}

// This rank's zigzag rows [B, T/cp, h, hd] of a global [B, T, h, hd] tensor.
std::vector<double> rows_of(const std::vector<double>& g, const Zigzag& zz, int B, int T, int w) {
  std::vector<double> out;
  const index_t c = zz.chunk_len(T);
  for (int b = 0; b < B; ++b)
    for (int a = 0; a < 2; ++a) {
      const auto* src = g.data() + (std::size_t(b) * T + zz.chunk_of(zz.rank, a) * c) * w;
      out.insert(out.end(), src, src + c * w);
    }
  return out;
}
// The same for the log-sum-exp [B, H, T].
std::vector<double> lse_rows_of(const std::vector<double>& g, const Zigzag& zz, int B, int H, int T) {
  std::vector<double> out;
  const index_t c = zz.chunk_len(T);
  for (int bh = 0; bh < B * H; ++bh)
    for (int a = 0; a < 2; ++a) {
      const auto* src = g.data() + std::size_t(bh) * T + zz.chunk_of(zz.rank, a) * c;
      out.insert(out.end(), src, src + c);
    }
  return out;
}

// max |a - b| / max |b|, the worst over the ranks.
double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  double r = den > 0 ? num / den : num;
  MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return r;
}

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, MatchesSingleRankKernelForwardAndBackward) {
  const Case p = GetParam();
  const int cp = world_size();
  const Zigzag zz{cp, world_rank()};
  const int T = 2 * cp * p.c, Tl = 2 * p.c;
  const exa::kernels::AttentionTiles tiles{4, 3, 3};
  auto gen = [&](std::uint64_t seed, int h) {
    std::vector<double> x(std::size_t(p.B) * T * h * p.hd);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = splitmix_noise(seed, i);
    return x;
  };
  const auto gq = gen(1, p.H), gk = gen(2, p.Hkv), gv = gen(3, p.Hkv), gdo = gen(4, p.H);

  // The single-rank reference on the whole sequences.
  A4 q = device(gq, p.B, T, p.H, p.hd), k = device(gk, p.B, T, p.Hkv, p.hd), v = device(gv, p.B, T, p.Hkv, p.hd);
  A4 dout = device(gdo, p.B, T, p.H, p.hd);
  A4 out("out", p.B, T, p.H, p.hd), dq("dq", p.B, T, p.H, p.hd), dk("dk", p.B, T, p.Hkv, p.hd),
      dv("dv", p.B, T, p.Hkv, p.hd);
  L3 lse("lse", p.B, p.H, T);
  exa::kernels::attention_forward(q, k, v, out, lse, tiles);
  exa::kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, tiles);
  auto lse_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  const std::vector<double> glse(lse_h.data(), lse_h.data() + lse_h.span());

  // The ring on this rank's rows.
  const int wq = p.H * p.hd, wk = p.Hkv * p.hd;
  A4 lq = device(rows_of(gq, zz, p.B, T, wq), p.B, Tl, p.H, p.hd);
  A4 lk = device(rows_of(gk, zz, p.B, T, wk), p.B, Tl, p.Hkv, p.hd);
  A4 lv = device(rows_of(gv, zz, p.B, T, wk), p.B, Tl, p.Hkv, p.hd);
  A4 ldo = device(rows_of(gdo, zz, p.B, T, wq), p.B, Tl, p.H, p.hd);
  A4 lo("lo", p.B, Tl, p.H, p.hd), ldq("ldq", p.B, Tl, p.H, p.hd), ldk("ldk", p.B, Tl, p.Hkv, p.hd),
      ldv("ldv", p.B, Tl, p.Hkv, p.hd);
  L3 llse("llse", p.B, p.H, Tl);
  RingAttention<double> ring(exa::comm::make_mpi_communicator(MPI_COMM_WORLD), tiles);
  ring.forward(lq, lk, lv, lo, llse, {});
  ring.backward(ldo, lq, lk, lv, lo, llse, ldq, ldk, ldv, {});
  // Twice: the buffers kept from the first call give the same results.
  ring.forward(lq, lk, lv, lo, llse, {});
  ring.backward(ldo, lq, lk, lv, lo, llse, ldq, ldk, ldv, {});

  auto llse_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), llse);
  const std::vector<double> mylse(llse_h.data(), llse_h.data() + llse_h.span());
  const double e_out = rel_error(host(lo), rows_of(host(out), zz, p.B, T, wq));
  const double e_lse = rel_error(mylse, lse_rows_of(glse, zz, p.B, p.H, T));
  const double e_dq = rel_error(host(ldq), rows_of(host(dq), zz, p.B, T, wq));
  const double e_dk = rel_error(host(ldk), rows_of(host(dk), zz, p.B, T, wk));
  const double e_dv = rel_error(host(ldv), rows_of(host(dv), zz, p.B, T, wk));
  if (zz.rank == 0)
    std::printf("cp %d, H %d, Hkv %d: max rel error out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", cp, p.H, p.Hkv,
                e_out, e_lse, e_dq, e_dk, e_dv);
  EXPECT_LE(e_out, 1e-6);
  EXPECT_LE(e_lse, 1e-6);
  EXPECT_LE(e_dq, 1e-6);
  EXPECT_LE(e_dk, 1e-6);
  EXPECT_LE(e_dv, 1e-6);
}

// d/dx of sum over the ranks of (ring out . dout), central differences on a
// few global elements of q, k and v, against the ring's backward.
TEST_P(RingAttentionTest, MergeGradientsMatchFiniteDifferences) {
  const Case p = GetParam();
  const int cp = world_size();
  const Zigzag zz{cp, world_rank()};
  const int T = 2 * cp * p.c, Tl = 2 * p.c, wq = p.H * p.hd, wk = p.Hkv * p.hd;
  const exa::kernels::AttentionTiles tiles{4, 3, 3};
  std::vector<double> g[3];  // global q, k, v
  for (int t = 0; t < 3; ++t) {
    g[t].resize(std::size_t(p.B) * T * (t == 0 ? wq : wk));
    for (std::size_t i = 0; i < g[t].size(); ++i) g[t][i] = splitmix_noise(11 + t, i);
  }
  std::vector<double> gdo(std::size_t(p.B) * T * wq);
  for (std::size_t i = 0; i < gdo.size(); ++i) gdo[i] = splitmix_noise(17, i);
  RingAttention<double> ring(exa::comm::make_mpi_communicator(MPI_COMM_WORLD), tiles);
  A4 ldo = device(rows_of(gdo, zz, p.B, T, wq), p.B, Tl, p.H, p.hd);
  const auto ldo_h = host(ldo);
  A4 lo("lo", p.B, Tl, p.H, p.hd);
  L3 llse("llse", p.B, p.H, Tl);
  auto local = [&](int t) {
    return device(rows_of(g[t], zz, p.B, T, t == 0 ? wq : wk), p.B, Tl, t == 0 ? p.H : p.Hkv, p.hd);
  };
  auto objective = [&]() {
    A4 lq = local(0), lk = local(1), lv = local(2);
    ring.forward(lq, lk, lv, lo, llse, {});
    const auto o = host(lo);
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * ldo_h[i];
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
  };
  objective();
  A4 lq = local(0), lk = local(1), lv = local(2);
  A4 ldq("ldq", p.B, Tl, p.H, p.hd), ldk("ldk", p.B, Tl, p.Hkv, p.hd), ldv("ldv", p.B, Tl, p.Hkv, p.hd);
  ring.backward(ldo, lq, lk, lv, lo, llse, ldq, ldk, ldv, {});
  // The analytic gradients, gathered into global order (each rank fills its rows).
  std::vector<double> grad[3];
  const A4* mine[3] = {&ldq, &ldk, &ldv};
  for (int t = 0; t < 3; ++t) {
    const int w = t == 0 ? wq : wk;
    grad[t].assign(g[t].size(), 0.0);
    const auto h = host(*mine[t]);
    const index_t c = p.c;
    for (int b = 0; b < p.B; ++b)
      for (int a = 0; a < 2; ++a)
        std::copy(h.begin() + (std::size_t(b) * Tl + a * c) * w, h.begin() + (std::size_t(b) * Tl + (a + 1) * c) * w,
                  grad[t].begin() + (std::size_t(b) * T + zz.chunk_of(zz.rank, a) * c) * w);
    MPI_Allreduce(MPI_IN_PLACE, grad[t].data(), int(grad[t].size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  const double eps = 1e-5;
  double worst = 0;
  for (int t = 0; t < 3; ++t)
    for (int n = 0; n < 6; ++n) {
      const std::size_t i = (std::size_t(n) * 7919 + 13 * t) % g[t].size();
      const double x0 = g[t][i];
      g[t][i] = x0 + eps;
      const double fp = objective();
      g[t][i] = x0 - eps;
      const double fm = objective();
      g[t][i] = x0;
      const double fd = (fp - fm) / (2 * eps);
      worst = std::max(worst, std::fabs(fd - grad[t][i]) / std::max(1.0, std::fabs(fd)));
    }
  if (zz.rank == 0) std::printf("cp %d: worst finite-difference error %.2e\n", cp, worst);
  EXPECT_LE(worst, 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RingAttentionTest,
                         ::testing::Values(Case{2, 5, 2, 2, 8}, Case{1, 4, 4, 2, 6}));

}  // namespace
