// The zero-bubble schedule under sequence parallelism: the deferred weight
// gradient of a column-parallel linear (whose input rows are split over the
// Tp group) and of a row-parallel one (whose output gradient rows are)
// gathers its operands while it is recorded, during B, so that running it
// later enters no collective. The ranks run their W at different times
// here (rank 0 before a barrier, the others after it), which would hang if
// W gathered; the recorded bytes are the gathered operands', and the
// gradients equal the products of the whole matrices. Run at 1, 2 and 4
// ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "harness/noise_matrix.hpp"
#include "kernels/gemm.hpp"
#include "parallel/pipeline/deferred_weights.hpp"
#include "parallel/tensor/parallel_linear.hpp"

namespace {

using exa::parallel::pipeline::DeferredLinear;
using exa::parallel::pipeline::WeightGradQueue;
using Act = WeightGradQueue::Act;
using Wt = WeightGradQueue::Wt;
using Own = Kokkos::View<float**, exa::Layout, exa::Device>;

Own dsp_random(const char* name, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  return exa::test::noise_matrix<float>(name, rows, cols, seed);
}

void expect_same_product(const Own& got, const Own& dy, const Own& x, const char* what) {
  const Own want("want", got.extent(0), got.extent(1));
  exa::kernels::gemm('T', 'N', 1.0f, dy, x, 0.0f, want);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), got);
  auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), want);
  for (std::size_t i = 0; i < g.extent(0); ++i)
    for (std::size_t j = 0; j < g.extent(1); ++j) ASSERT_NEAR(g(i, j), w(i, j), 1e-5f * (1 + std::abs(w(i, j)))) << what;
}

// Rank 0 runs its W first, every other rank after a barrier.
void run_staggered(WeightGradQueue& q, int rank) {
  if (rank == 0) q.run_all();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) q.run_all();
  EXPECT_TRUE(q.empty());
}

TEST(DeferredWeightsSequenceParallel, GatheredDuringBackwardNotDuringW) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::size_t n = 3, rows = n * std::size_t(size), d = 5, f = 4;
  const auto tp = std::make_shared<const exa::parallel::tensor::TpComm>(exa::comm::make_mpi_communicator(MPI_COMM_WORLD));
  const auto own = Kokkos::make_pair(n * std::size_t(rank), n * std::size_t(rank + 1));

  // Column-parallel: x is this rank's rows of X [rows, d], dy_r [rows, f].
  {
    const Own X = dsp_random("X", rows, d, 1), dy = dsp_random("dY_r", rows, f, 10 + std::uint64_t(rank));
    const Act x("x", n, d);
    Kokkos::deep_copy(x, Kokkos::subview(X, own, Kokkos::ALL));
    auto queue = std::make_shared<WeightGradQueue>();
    const DeferredLinear lin(std::make_shared<const exa::parallel::tensor::ColumnParallelLinear<float>>(tp, false),
                             queue);
    const Own dw("dw", f, d);
    queue->open(0);
    lin.backward_weight(x, dy, Wt(dw.data(), f, d), true);
    queue->close();
    ASSERT_EQ(queue->bytes(), sizeof(float) * (rows * d + rows * f)) << "the gathered input is recorded";
    Kokkos::deep_copy(x, 7.0f);  // the saved activation is no longer read
    run_staggered(*queue, rank);
    expect_same_product(dw, dy, X, "column-parallel dW_r = dY_r^T X");
  }
  // Row-parallel: x_r [rows, f] (the column output), dy this rank's rows
  // of dY [rows, d].
  {
    const Own xr = dsp_random("X_r", rows, f, 20 + std::uint64_t(rank)), DY = dsp_random("dY", rows, d, 2);
    const Act dy("dy", n, d);
    Kokkos::deep_copy(dy, Kokkos::subview(DY, own, Kokkos::ALL));
    auto queue = std::make_shared<WeightGradQueue>();
    const DeferredLinear lin(std::make_shared<const exa::parallel::tensor::RowParallelLinear<float>>(tp), queue);
    const Own dw("dw", d, f);
    queue->open(0);
    lin.backward_weight(Act(xr.data(), rows, f), dy, Wt(dw.data(), d, f), true);
    queue->close();
    ASSERT_EQ(queue->bytes(), sizeof(float) * (rows * f + rows * d)) << "the gathered output gradient is recorded";
    Kokkos::deep_copy(dy, 7.0f);  // scratch the next layer overwrites
    run_staggered(*queue, rank);
    expect_same_product(dw, DY, xr, "row-parallel dW_r = dY^T X_r");
  }
}

}  // namespace
