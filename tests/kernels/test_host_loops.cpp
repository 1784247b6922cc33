// The host fast paths' building blocks (kernels/host_loops.hpp): the
// 16-lane dot product, the chunking of a range and the vectorisable exp.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "kernels/host_loops.hpp"

namespace ed = exa::kernels::detail;

TEST(HostLoops, Dot16SumsEveryElementIncludingTheTail) {
  for (int n : {0, 1, 15, 16, 17, 100}) {
    std::vector<float> a(n), b(n);
    double want = 0;
    for (int i = 0; i < n; ++i) {
      a[i] = float(i % 7) - 3.0f;
      b[i] = 0.5f * float(i % 5);
      want += double(a[i]) * double(b[i]);
    }
    EXPECT_DOUBLE_EQ(ed::dot16<double>(a.data(), b.data(), n), want) << "n = " << n;
  }
}

TEST(HostLoops, ChunksCoverTheRangeOnce) {
  using Exec = Kokkos::DefaultHostExecutionSpace;
  const exa::index_t total = 3 * ed::kHostChunk + 5;
  Kokkos::View<int*, Kokkos::HostSpace> seen("seen", total);
  ed::for_host_chunks("test::chunks", Exec(), total, [=](exa::index_t i0, exa::index_t i1) {
    for (exa::index_t i = i0; i < i1; ++i) seen(i) += 1;
  });
  Kokkos::fence();
  int wrong = 0;
  for (exa::index_t i = 0; i < total; ++i) wrong += seen(i) != 1;
  EXPECT_EQ(wrong, 0);
}

TEST(HostLoops, HostExpIsWithinTwoUlpOfExpAndKeepsTheEnds) {
  // 2^21 points evenly over the range where exp is a normal float.
  const int n = 1 << 21;
  double worst = 0;
  float at = 0;
  for (int i = 0; i <= n; ++i) {
    const float x = -87.3f + float(175.67 * i / n);
    const double want = std::exp(double(x));
    const double err = std::fabs(double(ed::host_exp(x)) - want) / want;
    if (err > worst) {
      worst = err;
      at = x;
    }
  }
  std::printf("host_exp: worst relative error %.3g (%.2f ulp) at x = %.9g\n", worst, worst / 0x1p-24, at);
  EXPECT_LE(worst, 2 * 0x1p-24);
  EXPECT_TRUE(std::isnan(ed::host_exp(std::nanf(""))));
  EXPECT_EQ(ed::host_exp(0.0f), 1.0f);
  EXPECT_EQ(ed::host_exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ed::host_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ed::host_exp(-100.0f), 0.0f);
  EXPECT_EQ(ed::host_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ed::host_exp(0.5), std::exp(0.5));  // double keeps std::exp
}
