// The column-parallel Linear under sequence parallelism, overlapped
// (comm.overlap: the input gathered block by block while the GEMMs of the
// blocks already here run, the backward's allgather and reduce-scatter
// behind its GEMMs) and not, against products computed from the whole
// matrices: forward y = X W_r^T (also accumulated onto y), backward
// dX = own rows of sum_r dY_r W_r and dW_r = dY_r^T X. Run at 1, 2 and 4
// ranks; the two paths must agree to rounding.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "harness/noise_matrix.hpp"
#include "kernels/gemm.hpp"
#include "parallel/tensor/parallel_linear.hpp"

namespace {

using Linear = exa::parallel::tensor::ColumnParallelLinear<double>;
using Act = Linear::Act;
using Wt = Linear::Wt;                                          // unmanaged
using Own = Kokkos::View<double**, exa::Layout, exa::Device>;  // allocates

Own cpo_random(const char* name, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  return exa::test::noise_matrix<double>(name, rows, cols, seed);
}

template <class V>
std::vector<double> cpo_host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out;
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j) out.push_back(h(i, j));
  return out;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12 * (1 + std::abs(b[i]))) << what << " [" << i << "]";
}

struct Result {
  std::vector<double> y, y_acc, dx, dw;
};

TEST(ColumnParallelOverlap, ChunkedGatherMatchesWholeProducts) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::size_t n = 5, in = 7, out = 6, rows = n * std::size_t(size);  // odd sizes: no aligned shortcuts
  const auto tp = std::make_shared<const exa::parallel::tensor::TpComm>(exa::comm::make_mpi_communicator(MPI_COMM_WORLD));

  const Own X = cpo_random("X", rows, in, 1);                         // the whole sequence
  const Own w = cpo_random("W_r", out, in, 10 + std::uint64_t(rank));   // this rank's output columns
  const Own dy = cpo_random("dY_r", rows, out, 20 + std::uint64_t(rank));
  const Own y0 = cpo_random("y0", rows, out, 30);
  const auto own = Kokkos::make_pair(n * std::size_t(rank), n * std::size_t(rank + 1));
  const Act x("x", n, in);
  Kokkos::deep_copy(x, Kokkos::subview(X, own, Kokkos::ALL));

  // Whole products.
  Result want;
  {
    const Act y("y", rows, out), ya("ya", rows, out), full_dx("full_dx", rows, in);
    const Own dw("dw", out, in);
    exa::kernels::gemm('N', 'T', 1.0, X, w, 0.0, y);
    Kokkos::deep_copy(ya, y0);
    exa::kernels::gemm('N', 'T', 1.0, X, w, 1.0, ya);
    exa::kernels::gemm('N', 'N', 1.0, dy, w, 0.0, full_dx);
    Kokkos::fence();
    MPI_Allreduce(MPI_IN_PLACE, full_dx.data(), int(full_dx.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    exa::kernels::gemm('T', 'N', 1.0, dy, X, 0.0, dw);
    want = {cpo_host(y), cpo_host(ya), cpo_host(Kokkos::subview(full_dx, own, Kokkos::ALL)), cpo_host(dw)};
  }

  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap on" : "overlap off");
    const Linear lin(tp, overlap);
    const Act y("y", rows, out), ya("ya", rows, out), dx("dx", n, in);
    const Own dw("dw", out, in);
    lin.forward(x, w, y);
    Kokkos::deep_copy(ya, y0);
    lin.forward(x, w, ya, true);
    lin.backward(x, w, dy, dx, dw);
    expect_close(cpo_host(y), want.y, "forward");
    expect_close(cpo_host(ya), want.y_acc, "forward, accumulated");
    expect_close(cpo_host(dx), want.dx, "input gradient");
    expect_close(cpo_host(dw), want.dw, "weight gradient");
  }
}

}  // namespace
