// Distillation's kernels (kernels/distill.hpp) against a double reference
// written from the definitions (softmax, KL, its gradient), on both paths:
// contiguous LayoutRight rows take the host fast path on host backends,
// LayoutLeft copies the portable kernels. The columns are split in two
// pieces, as two vocabulary-parallel ranks hold them, with the row max and
// sums reduced by hand between the steps. Sizes have tails past 16 lanes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/distill.hpp"

using namespace exa::test;
namespace kd = exa::kernels::distill;
using exa::index_t;

namespace {

template <class T>
using R1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using R2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using L2 = Kokkos::View<T**, Kokkos::LayoutLeft, TestDevice>;
using I1 = Kokkos::View<std::int32_t*, Kokkos::LayoutRight, TestDevice>;

constexpr index_t kN = 9, kV = 301, kSplit = 133;  // two "ranks": columns [0, 133) and [133, 301)
constexpr double kTau = 2.3, kCoef = 0.7, kDloss = 1.5;

struct Reference {
  std::vector<double> q, grad;  // [N*V]
  double kl = 0;
  index_t n_valid = 0;
};

// The definitions in double: q = softmax(zt / tau), p = softmax(zs / tau),
// the KL summed over rows with a target, and the gradient of dloss *
// (ce + coef tau^2 kl) / n_valid with respect to zs.
template <class H>
Reference reference(const H& zt, const H& zs, const std::vector<std::int32_t>& t) {
  Reference r;
  r.q.assign(std::size_t(kN * kV), 0);
  r.grad.assign(std::size_t(kN * kV), 0);
  for (index_t n = 0; n < kN; ++n) r.n_valid += t[std::size_t(n)] >= 0 ? 1 : 0;
  for (index_t n = 0; n < kN; ++n) {
    auto softmax = [&](const H& z, double tau) {
      std::vector<double> p(static_cast<std::size_t>(kV), 0.0);
      double mx = -1e300, s = 0;
      for (index_t j = 0; j < kV; ++j) mx = std::max(mx, double(z(n, j)) / tau);
      for (index_t j = 0; j < kV; ++j) s += p[std::size_t(j)] = std::exp(double(z(n, j)) / tau - mx);
      for (auto& x : p) x /= s;
      return p;
    };
    const auto q = softmax(zt, kTau), p = softmax(zs, kTau), ps = softmax(zs, 1.0);
    for (index_t j = 0; j < kV; ++j) r.q[std::size_t(n * kV + j)] = q[std::size_t(j)];
    if (t[std::size_t(n)] < 0) continue;
    for (index_t j = 0; j < kV; ++j) {
      const auto k = std::size_t(j);
      r.kl += q[k] * (std::log(q[k]) - std::log(p[k]));
      const double ce = ps[k] - (j == t[std::size_t(n)] ? 1.0 : 0.0);
      r.grad[std::size_t(n * kV + j)] = kDloss / double(r.n_valid) * (ce + kCoef * kTau * (p[k] - q[k]));
    }
  }
  return r;
}

// Columns [c0, c1) of a LayoutRight matrix, as a fresh LayoutRight or
// LayoutLeft View.
template <class Out>
Out columns(const R2<float>& z, index_t c0, index_t c1) {
  R2<float> piece("piece", z.extent(0), std::size_t(c1 - c0));
  auto hz = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), z);
  auto hp = Kokkos::create_mirror_view(piece);
  for (std::size_t n = 0; n < hz.extent(0); ++n)
    for (index_t j = c0; j < c1; ++j) hp(n, std::size_t(j - c0)) = hz(n, std::size_t(j));
  Kokkos::deep_copy(piece, hp);
  Out out("out", piece.extent(0), piece.extent(1));
  Kokkos::deep_copy(out, piece);
  return out;
}

// Both sides over two column pieces of layout M (R2 or L2), the reductions
// done by hand; checks every output against the reference.
template <class M>
void check_two_ranks(const char* what) {
  R2<float> zt("zt", kN, kV), zs("zs", kN, kV);
  fill_uniform(zt, 11, -6.0, 6.0);
  fill_uniform(zs, 12, -6.0, 6.0);
  std::vector<std::int32_t> tv(static_cast<std::size_t>(kN), 0);
  for (index_t n = 0; n < kN; ++n) tv[std::size_t(n)] = std::int32_t((n * 97 + 5) % kV);
  tv[3] = -1;  // ignored
  I1 targets("targets", kN);
  auto ht = Kokkos::create_mirror_view(targets);
  for (index_t n = 0; n < kN; ++n) ht(n) = tv[std::size_t(n)];
  Kokkos::deep_copy(targets, ht);
  const auto ref = reference(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), zt),
                             Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), zs), tv);

  const index_t cuts[3] = {0, kSplit, kV};
  M t[2], s[2], q[2];
  R1<double> h[2], lse("lse", kN);
  R1<float> ce_lse("ce_lse", kN);
  for (int r = 0; r < 2; ++r) {
    t[r] = columns<M>(zt, cuts[r], cuts[r + 1]);
    s[r] = columns<M>(zs, cuts[r], cuts[r + 1]);
    q[r] = M("q", kN, std::size_t(cuts[r + 1] - cuts[r]));
    h[r] = R1<double>("neg_entropy", kN);
  }
  // max over both pieces, then the sums over both pieces.
  auto reduced = [&](M* z, double tau, M* terms) {
    R1<float> mx[2] = {R1<float>("mx0", kN), R1<float>("mx1", kN)};
    R1<double> sums[2] = {R1<double>("s0", kN), R1<double>("s1", kN)};
    for (int r = 0; r < 2; ++r) kd::row_max(z[r], mx[r]);
    auto m0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mx[0]);
    auto m1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mx[1]);
    for (index_t n = 0; n < kN; ++n) m0(n) = std::max(m0(n), m1(n));
    for (int r = 0; r < 2; ++r) Kokkos::deep_copy(mx[r], m0);
    for (int r = 0; r < 2; ++r) kd::exp_sums(z[r], mx[r], tau, sums[r], terms ? terms[r] : M());
    auto s0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sums[0]);
    auto s1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sums[1]);
    for (index_t n = 0; n < kN; ++n) s0(n) += s1(n);
    for (int r = 0; r < 2; ++r) Kokkos::deep_copy(sums[r], s0);
    return std::make_pair(mx[0], sums[0]);
  };
  // Teacher.
  const auto [mt, st] = reduced(t, kTau, q);
  for (int r = 0; r < 2; ++r) kd::normalise(t[r], mt, st, kTau, q[r], h[r]);
  // Student: tempered lse, KL, and the untempered lse the cross-entropy keeps.
  const auto [ms, ss] = reduced(s, kTau, nullptr);
  kd::finish_lse(ms, ss, kTau, lse);
  double kl = 0;
  for (int r = 0; r < 2; ++r) kl += kd::kl_sum(s[r], targets, lse, q[r], h[r], kTau);
  const auto [m1, s1] = reduced(s, 1.0, nullptr);
  kd::finish_lse(m1, s1, 1.0, ce_lse);
  EXPECT_NEAR(kl, ref.kl, 2e-5 * std::max(1.0, ref.kl)) << what << ": the KL";
  EXPECT_GT(ref.kl, 0.1) << "the check needs a teacher far from the student";

  double worst_q = 0, worst_g = 0, scale_g = 0;
  for (int r = 0; r < 2; ++r) {
    kd::ce_grad(s[r], targets, ce_lse, lse, q[r], kTau, kCoef, cuts[r], kDloss, ref.n_valid);
    auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q[r]);
    auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s[r]);
    for (index_t n = 0; n < kN; ++n)
      for (index_t j = cuts[r]; j < cuts[r + 1]; ++j) {
        const auto k = std::size_t(n * kV + j);
        const auto c = std::size_t(j - cuts[r]);
        worst_q = std::max(worst_q, std::fabs(double(hq(n, c)) - ref.q[k]) / std::max(ref.q[k], 1e-6));
        worst_g = std::max(worst_g, std::fabs(double(hg(n, c)) - ref.grad[k]));
        scale_g = std::max(scale_g, std::fabs(ref.grad[k]));
      }
  }
  EXPECT_LE(worst_q, 1e-5) << what << ": soft targets";
  EXPECT_LE(worst_g, 1e-5 * scale_g) << what << ": gradient (largest " << scale_g << ")";
}

}  // namespace

TEST(Distill, HostFastPathMatchesTheDefinitionsAcrossTwoColumnPieces) { check_two_ranks<R2<float>>("LayoutRight"); }

TEST(Distill, PortableKernelsMatchTheDefinitionsAcrossTwoColumnPieces) { check_two_ranks<L2<float>>("LayoutLeft"); }
