#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/permute.hpp"

using namespace exa::test;
using exa::index_t;

namespace {

template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;

// Expert choices: token n picks k distinct experts from a small hash.
V2<int> make_topk(int N, int k, int E, std::uint64_t seed) {
  V2<int> topk("topk", N, k);
  auto h = Kokkos::create_mirror_view(topk);
  std::uint64_t s = seed;
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      int e;
      bool dup;
      do {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        e = static_cast<int>((s >> 33) % E);
        dup = false;
        for (int l = 0; l < j; ++l) dup |= h(n, l) == e;
      } while (dup);
      h(n, j) = e;
    }
  Kokkos::deep_copy(topk, h);
  return topk;
}

V2<int> topk_from(const std::vector<std::vector<int>>& rows) {
  V2<int> topk("topk", rows.size(), rows.empty() ? 0 : rows[0].size());
  auto h = Kokkos::create_mirror_view(topk);
  for (std::size_t n = 0; n < rows.size(); ++n)
    for (std::size_t j = 0; j < rows[n].size(); ++j) h(n, j) = rows[n][j];
  Kokkos::deep_copy(topk, h);
  return topk;
}

// Host reference: walk (n, j) in order, keep the first C of each expert.
template <class Plan>
void check_plan_against_host(const V2<int>& topk, int E, index_t C, const Plan& plan) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), topk);
  const int N = h.extent(0), K = h.extent(1);
  std::vector<int> routed(E, 0), kept(E, 0);
  std::vector<std::vector<int>> rank(N, std::vector<int>(K, -1));
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      const int e = h(n, j);
      if (C == 0 || routed[e] < C) rank[n][j] = kept[e]++;
      ++routed[e];
    }
  std::vector<index_t> off(E + 1, 0);
  for (int e = 0; e < E; ++e) off[e + 1] = off[e] + kept[e];
  ASSERT_EQ(plan.rows, off[E]);
  EXPECT_EQ(plan.dropped, index_t(N) * K - off[E]);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.counts);
  auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.routed);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.offsets);
  for (int e = 0; e < E; ++e) {
    EXPECT_EQ(hc(e), kept[e]) << "expert " << e;
    EXPECT_EQ(hr(e), routed[e]) << "expert " << e;
  }
  for (int e = 0; e <= E; ++e) {
    EXPECT_EQ(ho(e), off[e]) << "offset " << e;
    EXPECT_EQ(plan.offsets_host(e), off[e]) << "host offset " << e;
  }
  auto hrow = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.row_of);
  auto htok = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.token_of);
  ASSERT_EQ(index_t(htok.extent(0)), off[E]);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      const int expect = rank[n][j] < 0 ? -1 : static_cast<int>(off[h(n, j)] + rank[n][j]);
      EXPECT_EQ(hrow(n, j), expect) << "assignment (" << n << ", " << j << ")";
      if (expect >= 0) {
        EXPECT_EQ(htok(expect), n) << "row " << expect;
      }
    }
}

}  // namespace

TEST(Permute, DroplessRoundTrip) {
  const int N = 10, K = 2, E = 4, d = 5;
  auto topk = make_topk(N, K, E, 1);
  auto plan = exa::kernels::permute_plan(topk, E, 0);
  check_plan_against_host(topk, E, 0, plan);
  EXPECT_EQ(plan.rows, N * K);
  EXPECT_EQ(plan.dropped, 0);

  V2<float> x("x", N, d), xp("xp", plan.rows, d), y("y", N, d), dx("dx", N, d);
  fill_uniform(x, 2);
  exa::kernels::permute_forward(x, plan.token_of, xp);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hxp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), xp);
  auto htok = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.token_of);
  for (index_t r = 0; r < plan.rows; ++r)
    for (int c = 0; c < d; ++c) EXPECT_EQ(hxp(r, c), hx(htok(r), c));

  // Gates summing to 1: unpermute(permute(x)) == x.
  V2<float> gates("gates", N, K);
  auto hg = Kokkos::create_mirror_view(gates);
  for (int n = 0; n < N; ++n) {
    hg(n, 0) = 0.25f + 0.05f * n;
    hg(n, 1) = 1.0f - hg(n, 0);
  }
  Kokkos::deep_copy(gates, hg);
  exa::kernels::unpermute_forward(xp, gates, plan.row_of, y);
  EXPECT_LE(max_rel_diff(y, x), 1e-6);

  // permute_backward(permute_forward(x)) == k x when nothing is dropped.
  exa::kernels::permute_backward(xp, plan.row_of, dx);
  auto hdx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dx);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < d; ++c) EXPECT_EQ(hdx(n, c), float(K) * hx(n, c));
}

TEST(Permute, CapacityDropsOverflowInTokenOrder) {
  // Expert 0 is wanted 5 times, in slot 0 or slot 1; capacity 3 keeps its
  // assignments (0,0), (1,1), (2,0) and drops (3,1), (5,0).
  const std::vector<std::vector<int>> rows = {{0, 1}, {2, 0}, {0, 3}, {1, 0}, {2, 3}, {0, 2}};
  auto topk = topk_from(rows);
  auto plan = exa::kernels::permute_plan(topk, 4, 3);
  check_plan_against_host(topk, 4, 3, plan);
  auto hrow = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.row_of);
  EXPECT_EQ(hrow(0, 0), 0);
  EXPECT_EQ(hrow(1, 1), 1);
  EXPECT_EQ(hrow(2, 0), 2);
  EXPECT_EQ(hrow(3, 1), -1);
  EXPECT_EQ(hrow(5, 0), -1);
  EXPECT_EQ(plan.dropped, 2);
  // Expert 2 is wanted 3 times: exactly at capacity, nothing dropped.
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), plan.counts);
  EXPECT_EQ(hc(0), 3);
  EXPECT_EQ(hc(2), 3);

  // Dropped slots contribute nothing to the output.
  const int d = 3;
  V2<float> yp("yp", plan.rows, d), gates("gates", 6, 2), y("y", 6, d);
  Kokkos::deep_copy(yp, 1.0f);
  Kokkos::deep_copy(gates, 0.5f);
  exa::kernels::unpermute_forward(yp, gates, plan.row_of, y);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  EXPECT_EQ(hy(0, 0), 1.0f);
  EXPECT_EQ(hy(3, 0), 0.5f);
  EXPECT_EQ(hy(5, 2), 0.5f);
}

TEST(Permute, EmptyExpertsAndManyChunks) {
  // Only experts 1 and 4 of 6 are used; N*k crosses several 256-assignment chunks.
  const int N = 301, K = 2, E = 6;
  V2<int> topk("topk", N, K);
  auto h = Kokkos::create_mirror_view(topk);
  for (int n = 0; n < N; ++n) {
    h(n, 0) = (n % 3 == 0) ? 4 : 1;
    h(n, 1) = (n % 3 == 0) ? 1 : 4;
  }
  Kokkos::deep_copy(topk, h);
  for (index_t C : {index_t(0), index_t(150), index_t(301), index_t(1000)}) {
    auto plan = exa::kernels::permute_plan(topk, E, C);
    check_plan_against_host(topk, E, C, plan);
    EXPECT_EQ(plan.offsets_host(0), plan.offsets_host(1));  // expert 0 empty
    EXPECT_EQ(plan.offsets_host(5), plan.offsets_host(6));  // expert 5 empty
  }
  auto random = make_topk(N, 3, 7, 9);
  for (index_t C : {index_t(0), index_t(97), index_t(120)}) {
    auto plan = exa::kernels::permute_plan(random, 7, C);
    check_plan_against_host(random, 7, C, plan);
  }
}

TEST(Permute, NoTokens) {
  V2<int> topk("topk", 0, 2);
  auto plan = exa::kernels::permute_plan(topk, 3, 0);
  EXPECT_EQ(plan.rows, 0);
  for (int e = 0; e <= 3; ++e) EXPECT_EQ(plan.offsets_host(e), 0);
  V2<float> x("x", 0, 4), xp("xp", 0, 4), dx("dx", 0, 4);
  exa::kernels::permute_forward(x, plan.token_of, xp);
  exa::kernels::permute_backward(xp, plan.row_of, dx);
}

TEST(Permute, RejectsOutOfRangeExpertIds) {
  auto topk = topk_from({{0, 1}, {5, 2}});
  EXPECT_THROW(exa::kernels::permute_plan(topk, 4, 0), exa::Error);
}

TEST(Permute, PermuteBackwardMatchesFiniteDifferences) {
  const int N = 7, K = 2, E = 3, d = 4;
  auto topk = make_topk(N, K, E, 3);
  for (index_t C : {index_t(0), index_t(3)}) {
    auto plan = exa::kernels::permute_plan(topk, E, C);
    V2<double> x("x", N, d), xp("xp", plan.rows, d), r("r", plan.rows, d), dx("dx", N, d);
    fill_uniform(x, 4);
    fill_uniform(r, 5);
    exa::kernels::permute_backward(r, plan.row_of, dx);
    auto loss = [&] {
      exa::kernels::permute_forward(x, plan.token_of, xp);
      return dot(xp, r);
    };
    expect_grad_matches_fd(C == 0 ? "permute/dx dropless" : "permute/dx capacity 3", x, dx, loss, 1e-6);
  }
}

TEST(Permute, UnpermuteBackwardMatchesFiniteDifferences) {
  const int N = 7, K = 2, E = 3, d = 4;
  auto topk = make_topk(N, K, E, 6);
  for (index_t C : {index_t(0), index_t(3)}) {
    auto plan = exa::kernels::permute_plan(topk, E, C);
    V2<double> yp("yp", plan.rows, d), gates("gates", N, K), y("y", N, d), r("r", N, d);
    V2<double> dyp("dyp", plan.rows, d), dgates("dgates", N, K);
    fill_uniform(yp, 7);
    fill_uniform(gates, 8, 0.0, 1.0);
    fill_uniform(r, 9);
    Kokkos::deep_copy(dgates, std::nan(""));
    exa::kernels::unpermute_backward(r, yp, gates, plan.row_of, dyp, dgates);
    auto loss = [&] {
      exa::kernels::unpermute_forward(yp, gates, plan.row_of, y);
      return dot(y, r);
    };
    const std::string tag = C == 0 ? " dropless" : " capacity 3";
    expect_grad_matches_fd("unpermute/dyp" + tag, yp, dyp, loss, 1e-6);
    expect_grad_matches_fd("unpermute/dgates" + tag, gates, dgates, loss, 1e-6);
    if (C > 0) {
      EXPECT_GT(plan.dropped, 0);
    }
  }
}

// A keep mask (moe.capacity_scope = "sequence") replaces the capacity:
// masked assignments are dropped, the others keep their expert and token
// order, and a mask of all ones is the dropless plan.
TEST(Permute, KeepMaskDropsExactlyTheMaskedAssignments) {
  const int N = 300, K = 2, E = 5;
  const auto topk = make_topk(N, K, E, 17);
  V2<int> keep("keep", N, K), all("all", N, K);
  auto hk = Kokkos::create_mirror_view(keep);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) hk(n, j) = (n * 7 + j * 3) % 5 != 0 ? 1 : 0;
  Kokkos::deep_copy(keep, hk);
  Kokkos::deep_copy(all, 1);
  exa::kernels::PermutePlan<TestDevice> masked, full, dropless;
  exa::kernels::permute_plan(masked, topk, E, 0, TestExec{}, keep);
  exa::kernels::permute_plan(full, topk, E, 0, TestExec{}, all);
  exa::kernels::permute_plan(dropless, topk, E, 0);
  const auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), topk);
  const auto rm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), masked.row_of);
  const auto rf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full.row_of);
  const auto rd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dropless.row_of);
  const auto off = masked.offsets_host;
  std::vector<int> next(E, 0);
  index_t kept = 0;
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(rf(n, j), rd(n, j));
      const int e = ht(n, j);
      if (hk(n, j) == 0) {
        EXPECT_EQ(rm(n, j), -1) << n << "," << j;
        continue;
      }
      EXPECT_EQ(rm(n, j), int(off(e)) + next[std::size_t(e)]++) << n << "," << j;  // token order within e
      ++kept;
    }
  EXPECT_EQ(masked.rows, kept);
  EXPECT_EQ(masked.dropped, index_t(N) * K - kept);
  EXPECT_GT(masked.dropped, 0);
}
