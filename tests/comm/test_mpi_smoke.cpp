// MPI + Kokkos smoke test: every rank computes with Kokkos, the results meet
// over MPI, and a ring exchange closes. Run at 1, 2 and 4 ranks by ctest.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <vector>

#include "comm/mpi_env.hpp"
#include "kernels/global_norm.hpp"

namespace {

int world_rank() { return exa::comm_rank(MPI_COMM_WORLD); }
int world_size() { return exa::comm_size(MPI_COMM_WORLD); }

TEST(MpiSmoke, KokkosReductionMeetsOverAllreduce) {
  const int r = world_rank(), n = world_size();
  // Rank r holds the values r*100 + 0..99; sum of squares over all ranks is known.
  Kokkos::View<double*> v("v", 100);
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<>(0, 100), KOKKOS_LAMBDA(int i) { v(i) = r * 100 + i; });
  double local = exa::kernels::global_sq_norm(v);
  double global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double expect = 0;
  for (int k = 0; k < 100 * n; ++k) expect += double(k) * k;
  EXPECT_DOUBLE_EQ(global, expect);
}

TEST(MpiSmoke, RingExchangeCloses) {
  const int r = world_rank(), n = world_size();
  int token = r;
  int recv = -1;
  MPI_Sendrecv(&token, 1, MPI_INT, (r + 1) % n, 7, &recv, 1, MPI_INT, (r + n - 1) % n, 7, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  EXPECT_EQ(recv, (r + n - 1) % n);
}

}  // namespace
