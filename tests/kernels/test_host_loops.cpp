// The host fast paths' building blocks (kernels/host_loops.hpp): the
// 16-lane dot product and the chunking of a range.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
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
