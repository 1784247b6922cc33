#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/embedding.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {

template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
using Tok = Kokkos::View<std::int32_t*, Kokkos::LayoutRight, TestDevice>;

// Tokens with repeats, a vocabulary row never used (V-1) and one used many times (2).
Tok make_tokens(index_t n, index_t vocab) {
  Tok t("tok", n);
  auto h = Kokkos::create_mirror_view(t);
  for (index_t i = 0; i < n; ++i) h(i) = std::int32_t(i % 3 == 0 ? 2 : (i * 7 + 1) % (vocab - 1));
  for (index_t i = 0; i < n; ++i) {  // the caller's range check (host side, tests only)
    EXPECT_GE(h(i), 0);
    EXPECT_LT(h(i), vocab);
  }
  Kokkos::deep_copy(t, h);
  return t;
}

}  // namespace

TEST(Embedding, ForwardGathersRows) {
  const index_t V = 7, d = 5, N = 11;
  V2<double> table("table", V, d), out("out", N, d);
  fill_uniform(table, 1);
  auto tok = make_tokens(N, V);
  ek::embedding_forward(table, tok, out);
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tok);
  for (index_t n = 0; n < N; ++n)
    for (index_t j = 0; j < d; ++j) EXPECT_EQ(ho(n, j), ht(hk(n), j));
}

// d = 70 spans more than one host column block (64) and ends in a partial block.
TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const index_t V = 6, d = 70, N = 13;
  V2<double> table("table", V, d), out("out", N, d), r("r", N, d), dtable("dtable", V, d);
  fill_uniform(table, 2);
  fill_uniform(r, 3);
  fill_uniform(dtable, 4);  // garbage: overwritten when not accumulating
  auto tok = make_tokens(N, V);
  ek::embedding_backward(tok, r, dtable, /*accumulate=*/false);
  expect_grad_matches_fd("embedding/dtable", table, dtable, [&] {
    ek::embedding_forward(table, tok, out);
    return dot(out, r);
  });
  // The unused row V-1 gets exactly zero.
  auto h = Kokkos::create_mirror(dtable);
  Kokkos::deep_copy(h, dtable);
  for (index_t j = 0; j < d; ++j) EXPECT_EQ(h(V - 1, j), 0.0);

  // accumulate adds onto what is there.
  ek::embedding_backward(tok, r, dtable, /*accumulate=*/true);
  auto h2 = Kokkos::create_mirror(dtable);
  Kokkos::deep_copy(h2, dtable);
  for (index_t v = 0; v < V; ++v)
    for (index_t j = 0; j < d; ++j) EXPECT_NEAR(h2(v, j), 2 * h(v, j), 1e-14);
}

TEST(Embedding, BackwardIsBitReproducible) {
  const index_t V = 5, d = 130, N = 257;
  V2<float> dout("dout", N, d), a("a", V, d), b("b", V, d);
  fill_uniform(dout, 5);
  auto tok = make_tokens(N, V);
  ek::embedding_backward(tok, dout, a, false);
  ek::embedding_backward(tok, dout, b, false);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dout);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tok);
  // Same bits run to run, and the same bits as a sequential sum in token order.
  for (index_t v = 0; v < V; ++v)
    for (index_t j = 0; j < d; ++j) {
      float s = 0;
      for (index_t n = 0; n < N; ++n)
        if (hk(n) == v) s += hd(n, j);
      EXPECT_EQ(ha(v, j), hb(v, j));
      EXPECT_EQ(ha(v, j), s);
    }
}

TEST(Embedding, Fp32ForwardIsExactGather) {
  const index_t V = 9, d = 16, N = 20;
  V2<float> table("table", V, d), out("out", N, d);
  fill_uniform(table, 6);
  auto tok = make_tokens(N, V);
  ek::embedding_forward(table, tok, out);
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tok);
  for (index_t n = 0; n < N; ++n)
    for (index_t j = 0; j < d; ++j) EXPECT_EQ(ho(n, j), ht(hk(n), j));
}

TEST(Embedding, EmptyTokenList) {
  V2<double> table("table", 4, 3), out("out", 0, 3), dtable("dtable", 4, 3);
  Tok tok("tok", 0);
  fill_uniform(dtable, 7);
  ek::embedding_forward(table, tok, out);
  ek::embedding_backward(tok, out, dtable, false);
  EXPECT_EQ(dot(dtable, dtable), 0.0);
}
