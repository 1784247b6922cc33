// The host fast paths (kernels/host_loops.hpp) against the portable kernels
// on the same data. Contiguous LayoutRight Views take the fast path on host
// backends; LayoutLeft copies, or column slices of a wider buffer, take the
// portable MDRange/team kernels (on a device backend both are portable and
// the test compares layouts only). Sizes have tails past 16 lanes and more
// than one 8192-element chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/permute.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/swiglu.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {

template <class T>
using R1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using R2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using L2 = Kokkos::View<T**, Kokkos::LayoutLeft, TestDevice>;

template <class T>
L2<T> left_copy(const R2<T>& v) {
  L2<T> l(v.label() + "_left", v.extent(0), v.extent(1));
  Kokkos::deep_copy(l, v);
  return l;
}

// max_rel_diff of a LayoutRight result and a result of any layout.
template <class T, class V>
double diff(const R2<T>& fast, const V& portable) {
  R2<T> p("portable", portable.extent(0), portable.extent(1));
  Kokkos::deep_copy(p, portable);
  return max_rel_diff(p, fast);
}

// Column slice [0, cols) of a [rows, cols + 3] buffer: rows of stride cols + 3,
// a span that is not contiguous.
template <class T>
auto padded(index_t rows, index_t cols, const std::string& label) {
  R2<T> wide(label, rows, cols + 3);
  return Kokkos::subview(wide, Kokkos::ALL, Kokkos::make_pair(index_t(0), cols));
}

}  // namespace

TEST(HostFastPaths, SwigluMatchesPortableAndMixedLayouts) {
  const index_t N = 41, F = 300;  // 12300 elements: two chunks
  R2<float> a("a", N, F), b("b", N, F), h("h", N, F), dh("dh", N, F), da("da", N, F), db("db", N, F);
  fill_uniform(a, 1, -8.0, 8.0);
  fill_uniform(b, 2);
  fill_uniform(dh, 3);
  ek::swiglu_forward(a, b, h);
  ek::swiglu_backward(a, b, dh, da, db);

  auto as = padded<float>(N, F, "as"), bs = padded<float>(N, F, "bs"), hs = padded<float>(N, F, "hs");
  auto dhs = padded<float>(N, F, "dhs"), das = padded<float>(N, F, "das"), dbs = padded<float>(N, F, "dbs");
  Kokkos::deep_copy(as, a);
  Kokkos::deep_copy(bs, b);
  Kokkos::deep_copy(dhs, dh);
  ek::swiglu_forward(as, bs, hs);
  ek::swiglu_backward(as, bs, dhs, das, dbs);
  EXPECT_LE(diff(h, hs), 1e-6);
  EXPECT_LE(diff(da, das), 1e-6);
  EXPECT_LE(diff(db, dbs), 1e-6);

  // Contiguous Views of different layouts: element i of one span is not
  // element i of another, so no flat loop may pair them.
  auto al = left_copy(a), bl = left_copy(b);
  R2<float> hm("hm", N, F), dam("dam", N, F);
  L2<float> dbm("dbm", N, F);
  ek::swiglu_forward(al, bl, hm);
  ek::swiglu_backward(al, bl, dh, dam, dbm);
  EXPECT_LE(diff(h, hm), 1e-6);
  EXPECT_LE(diff(da, dam), 1e-6);
  EXPECT_LE(diff(db, dbm), 1e-6);
}

TEST(HostFastPaths, RmsnormMatchesPortable) {
  const index_t N = 37, d = 83;
  R2<float> x("x", N, d), y("y", N, d), dy("dy", N, d), dx("dx", N, d);
  R1<float> w("w", d), rstd("rstd", N), dw("dw", d), rstd_l("rstd_l", N), dw_l("dw_l", d);
  fill_uniform(x, 4, -3.0, 3.0);
  fill_uniform(w, 5, 0.5, 1.5);
  fill_uniform(dy, 6);
  ek::rmsnorm_forward(x, w, y, rstd);
  ek::rmsnorm_backward(x, w, rstd, dy, dx, dw, false);

  auto xl = left_copy(x), dyl = left_copy(dy);
  L2<float> yl("yl", N, d), dxl("dxl", N, d);
  ek::rmsnorm_forward(xl, w, yl, rstd_l);
  ek::rmsnorm_backward(xl, w, rstd_l, dyl, dxl, dw_l, false);
  EXPECT_LE(diff(y, yl), 1e-5);
  EXPECT_LE(max_rel_diff(rstd_l, rstd), 1e-5);
  EXPECT_LE(diff(dx, dxl), 1e-5);

  // accumulate_dx adds to what is there, on both paths.
  Kokkos::deep_copy(dx, 1.0f);
  Kokkos::deep_copy(dxl, 1.0f);
  ek::rmsnorm_backward(x, w, rstd, dy, dx, dw, false, true);
  ek::rmsnorm_backward(xl, w, rstd_l, dyl, dxl, dw_l, false, true);
  EXPECT_LE(diff(dx, dxl), 1e-5);
}

TEST(HostFastPaths, CrossEntropyMatchesPortable) {
  const index_t N = 29, V = 70;
  R2<float> logits("logits", N, V), dlogits("dlogits", N, V);
  R1<std::int32_t> targets("targets", N);
  R1<float> lse("lse", N), lse_l("lse_l", N);
  fill_uniform(logits, 7, -6.0, 6.0);
  auto ht = Kokkos::create_mirror_view(targets);
  for (index_t n = 0; n < N; ++n) ht(n) = n % 5 == 3 ? -1 : (n * 13) % V;  // some rows ignored
  Kokkos::deep_copy(targets, ht);

  const auto fast = ek::cross_entropy_forward_sum(logits, targets, lse);
  ek::cross_entropy_backward(logits, targets, lse, 0.7, fast.n_valid, dlogits);
  auto ll = left_copy(logits);
  L2<float> dl("dl", N, V);
  const auto portable = ek::cross_entropy_forward_sum(ll, targets, lse_l);
  ek::cross_entropy_backward(ll, targets, lse_l, 0.7, portable.n_valid, dl);
  EXPECT_EQ(fast.n_valid, portable.n_valid);
  EXPECT_NEAR(fast.loss_sum, portable.loss_sum, 1e-5 * portable.loss_sum);
  EXPECT_LE(max_rel_diff(lse, lse_l), 1e-6);
  EXPECT_LE(diff(dlogits, dl), 1e-6);
}

// Rows longer than the fast LSE's float-summed blocks (1024, with a tail),
// logits spread over 200 so that exp(l - max) falls below the clamp at
// -87.3, one row dominated by a single logit and one of equal logits: the
// same lse and losses as the portable kernel's double sum.
TEST(HostFastPaths, CrossEntropyLongRowsMatchPortable) {
  const index_t N = 6, V = 2 * 1024 + 37;
  R2<float> logits("logits", N, V);
  R1<std::int32_t> targets("targets", N);
  R1<float> lse("lse", N), lse_l("lse_l", N);
  fill_uniform(logits, 11, -120.0, 80.0);
  auto hl = Kokkos::create_mirror_view(logits);
  Kokkos::deep_copy(hl, logits);
  for (index_t j = 0; j < V; ++j) hl(4, j) = j == 1500 ? 30.0f : -3.0f;
  for (index_t j = 0; j < V; ++j) hl(5, j) = 0.25f;
  Kokkos::deep_copy(logits, hl);
  auto ht = Kokkos::create_mirror_view(targets);
  for (index_t n = 0; n < N; ++n) ht(n) = (n * 977) % V;
  Kokkos::deep_copy(targets, ht);

  const auto fast = ek::cross_entropy_forward_sum(logits, targets, lse);
  const auto portable = ek::cross_entropy_forward_sum(left_copy(logits), targets, lse_l);
  EXPECT_NEAR(fast.loss_sum, portable.loss_sum, 1e-6 * portable.loss_sum);
  EXPECT_LE(max_rel_diff(lse, lse_l), 1e-6);
  auto hlse = Kokkos::create_mirror_view(lse);
  Kokkos::deep_copy(hlse, lse);
  EXPECT_NEAR(hlse(5), 0.25 + std::log(double(V)), 1e-5);  // equal logits: max + log V
}

// Rows that a wrong row max (the fast path's integer-key max, its 16 lanes
// and tail) would turn into overflowing exps: the max alone in the tail
// and 150 above the rest, all-negative rows (one near -1e4, one whose max
// is its first logit), -inf logits, signed zeros, a NaN (an ignored row,
// NaN both ways); 37 rows cross the forward's 16-row groups.
TEST(HostFastPaths, CrossEntropyEdgeRowsMatchPortable) {
  const index_t N = 37, V = 53;
  R2<float> logits("logits", N, V);
  R1<std::int32_t> targets("targets", N);
  R1<float> lse("lse", N), lse_l("lse_l", N);
  fill_uniform(logits, 13, -6.0, 6.0);
  auto hl = Kokkos::create_mirror_view(logits);
  Kokkos::deep_copy(hl, logits);
  const float inf = std::numeric_limits<float>::infinity();
  for (index_t j = 0; j < V; ++j) {
    hl(0, j) = j == V - 1 ? 150.0f : hl(0, j);
    hl(1, j) = j % 7 == 2 ? -inf : hl(1, j);
    hl(2, j) = -1.0e4f + 50.0f * hl(2, j) / 6.0f;
    hl(3, j) = j == 10 ? -0.0f : j == 20 ? 0.0f : -3.0f;
    hl(4, j) = j == 40 ? 100.0f : -hl(4, j) * hl(4, j);
    hl(5, j) = j == 0 ? -0.5f : -1.0f - std::abs(hl(5, j));
  }
  hl(6, 17) = std::numeric_limits<float>::quiet_NaN();
  Kokkos::deep_copy(logits, hl);
  auto ht = Kokkos::create_mirror_view(targets);
  for (index_t n = 0; n < N; ++n) ht(n) = n == 6 || n % 4 == 3 ? -1 : (n * 11) % V;
  Kokkos::deep_copy(targets, ht);

  const auto fast = ek::cross_entropy_forward_sum(logits, targets, lse);
  const auto portable = ek::cross_entropy_forward_sum(left_copy(logits), targets, lse_l);
  EXPECT_EQ(fast.n_valid, portable.n_valid);
  EXPECT_NEAR(fast.loss_sum, portable.loss_sum, 1e-6 * std::abs(portable.loss_sum));
  auto hf = Kokkos::create_mirror_view(lse);
  auto hp = Kokkos::create_mirror_view(lse_l);
  Kokkos::deep_copy(hf, lse);
  Kokkos::deep_copy(hp, lse_l);
  for (index_t n = 0; n < N; ++n) {
    if (n == 6) {
      EXPECT_TRUE(std::isnan(hf(n)) && std::isnan(hp(n))) << hf(n) << " " << hp(n);
      continue;
    }
    EXPECT_NEAR(hf(n), hp(n), 1e-6 * std::max(1.0f, std::abs(hp(n)))) << "row " << n;
  }
  EXPECT_NEAR(hf(0), 150.0, 1e-5);
  EXPECT_NEAR(hf(4), 100.0, 1e-5);
}

// Rows shorter than, equal to and just past the explicit-vector LSE's
// widths (16 and 32 lanes on AVX-512, 8 and 16 on AVX2): the tail loops and
// masks alone, and a vector plus one logit.
TEST(HostFastPaths, CrossEntropyShortRowsMatchPortable) {
  for (const index_t V : {1, 5, 8, 15, 16, 17, 31, 32, 33, 48}) {
    const index_t N = 7;
    R2<float> logits("logits", N, V);
    R1<std::int32_t> targets("targets", N);
    R1<float> lse("lse", N), lse_l("lse_l", N);
    fill_uniform(logits, 17 + std::uint64_t(V), -9.0, 9.0);
    auto ht = Kokkos::create_mirror_view(targets);
    for (index_t n = 0; n < N; ++n) ht(n) = (n * 3) % V;
    Kokkos::deep_copy(targets, ht);
    const auto fast = ek::cross_entropy_forward_sum(logits, targets, lse);
    const auto portable = ek::cross_entropy_forward_sum(left_copy(logits), targets, lse_l);
    EXPECT_NEAR(fast.loss_sum, portable.loss_sum, 1e-6 * std::max(1.0, std::abs(portable.loss_sum))) << "V " << V;
    EXPECT_LE(max_rel_diff(lse, lse_l), 1e-6) << "V " << V;
  }
}

TEST(HostFastPaths, PermuteAndUnpermuteMatchPortable) {
  const int N = 50, K = 2, E = 4;
  const index_t d = 37;
  R2<int> topk("topk", N, K);
  auto hk = Kokkos::create_mirror_view(topk);
  for (int n = 0; n < N; ++n) {
    hk(n, 0) = n % E;
    hk(n, 1) = (n * 3 + 1) % E == n % E ? (n + 1) % E : (n * 3 + 1) % E;
  }
  Kokkos::deep_copy(topk, hk);
  const auto plan = ek::permute_plan(topk, E, 20);  // capacity 20 of 25: drops some
  ASSERT_GT(plan.dropped, 0);
  const index_t M = plan.rows;
  R2<float> x("x", N, d), xp("xp", M, d), dx("dx", N, d), y("y", N, d), dyp("dyp", M, d);
  R2<float> gates("gates", N, K), dgates("dgates", N, K), dgates_l("dgates_l", N, K);
  fill_uniform(x, 8);
  fill_uniform(gates, 9, 0.0, 1.0);
  ek::permute_forward(x, plan.token_of, xp);
  ek::permute_backward(xp, plan.row_of, dx);
  ek::unpermute_forward(xp, gates, plan.row_of, y);
  ek::unpermute_backward(x, xp, gates, plan.row_of, dyp, dgates);

  auto xl = left_copy(x), xpl = left_copy(xp);
  L2<float> xp2("xp2", M, d), dxl("dxl", N, d), yl("yl", N, d), dypl("dypl", M, d);
  ek::permute_forward(xl, plan.token_of, xp2);
  ek::permute_backward(xpl, plan.row_of, dxl);
  ek::unpermute_forward(xpl, gates, plan.row_of, yl);
  ek::unpermute_backward(xl, xpl, gates, plan.row_of, dypl, dgates_l);
  EXPECT_EQ(diff(xp, xp2), 0.0);
  EXPECT_LE(diff(dx, dxl), 1e-6);
  EXPECT_LE(diff(y, yl), 1e-6);
  EXPECT_LE(diff(dyp, dypl), 1e-6);
  EXPECT_LE(diff(dgates, dgates_l), 1e-6);
}
