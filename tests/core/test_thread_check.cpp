// The start-up thread checks (core/thread_check.hpp): which setups warn and
// what they tell the user to do, and the cores MFU counts. Pure functions of
// a described setup; nothing is timed.
#include <gtest/gtest.h>

#include <string>

#include <Kokkos_Core.hpp>

#include "core/thread_check.hpp"

using exa::BlasThreading;
using exa::ThreadSetup;

namespace {

ThreadSetup setup(int cores, int host, bool openmp, int blas, BlasThreading kind, int ranks = 1, int node = 0) {
  ThreadSetup s;
  s.cores_bound = cores;
  s.node_cores = node > 0 ? node : cores;
  s.ranks_on_node = ranks;
  s.host_threads = host;
  s.host_openmp = openmp;
  s.blas_threads = blas;
  s.blas = kind;
  return s;
}

bool mentions(const std::vector<std::string>& w, const std::string& what) {
  for (const auto& line : w)
    if (line.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(ThreadCheck, OneOpenMPPoolForKokkosAndBlasIsCoherent) {
  const auto s = setup(2, 2, true, 2, BlasThreading::openmp);
  EXPECT_TRUE(exa::thread_warnings(s).empty());
  EXPECT_EQ(exa::busy_threads(s), 2);
  EXPECT_EQ(exa::compute_cores(s), 2);
  EXPECT_DOUBLE_EQ(exa::peak_scale(s), 1.0);
}

TEST(ThreadCheck, OpenMPBesidePthreadsBlasWarnsOfTheFightAndTheFix) {
  const auto s = setup(2, 2, true, 2, BlasThreading::pthreads);
  const auto w = exa::thread_warnings(s);
  EXPECT_EQ(exa::busy_threads(s), 3);
  EXPECT_TRUE(mentions(w, "fight")) << (w.empty() ? "" : w[0]);
  EXPECT_TRUE(mentions(w, "libopenblas-openmp-dev"));
  EXPECT_TRUE(mentions(w, "OPENBLAS_NUM_THREADS=1"));
  EXPECT_TRUE(mentions(w, "3 threads")) << "and it oversubscribes the 2 cores";
}

TEST(ThreadCheck, OneThreadBlasBesideOpenMPCountsBothCoresForMfu) {
  const auto s = setup(2, 2, true, 1, BlasThreading::pthreads);
  EXPECT_TRUE(exa::thread_warnings(s).empty());
  EXPECT_EQ(exa::gemm_cores(s), 1);
  EXPECT_DOUBLE_EQ(exa::peak_scale(s), 2.0);
}

TEST(ThreadCheck, SequentialBlasAndSerialKokkosIsOneCore) {
  const auto s = setup(2, 1, false, 1, BlasThreading::sequential);
  EXPECT_TRUE(exa::thread_warnings(s).empty());
  EXPECT_EQ(exa::compute_cores(s), 1);
  EXPECT_DOUBLE_EQ(exa::peak_scale(s), 1.0);
}

TEST(ThreadCheck, MoreThreadsThanBoundCoresWarnsWithTheCount) {
  const auto w = exa::thread_warnings(setup(2, 4, true, 4, BlasThreading::openmp));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(mentions(w, "4 threads")) << w[0];
  EXPECT_TRUE(mentions(w, "OMP_NUM_THREADS=2")) << w[0];
  EXPECT_EQ(exa::compute_cores(setup(2, 4, true, 4, BlasThreading::openmp)), 2);
}

TEST(ThreadCheck, RanksSharingTheNodesCoresWarnWithTheirShare) {
  // Two Serial ranks, each with a 2-thread pthreads OpenBLAS, both free to use both cores.
  const auto s = setup(2, 1, false, 2, BlasThreading::pthreads, 2, 2);
  const auto w = exa::thread_warnings(s);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(mentions(w, "2 ranks x 2 threads")) << w[0];
  EXPECT_TRUE(mentions(w, "OPENBLAS_NUM_THREADS=1")) << w[0];
  EXPECT_EQ(exa::compute_cores(s), 1) << "each rank's share of the node is one core";
  EXPECT_DOUBLE_EQ(exa::peak_scale(s), 1.0);
}

TEST(ThreadCheck, RanksBoundToTheirOwnCoresDoNotWarn) {
  EXPECT_TRUE(exa::thread_warnings(setup(1, 1, false, 1, BlasThreading::pthreads, 2, 2)).empty());
  EXPECT_TRUE(exa::thread_warnings(setup(4, 4, true, 4, BlasThreading::openmp, 2, 8)).empty());
}

TEST(ThreadCheck, ProbeDescribesThisProcess) {
  const auto s = exa::probe_threads();
  EXPECT_GE(s.cores_bound, 1);
  EXPECT_EQ(s.node_cores, s.cores_bound);
  EXPECT_EQ(s.ranks_on_node, 1);
  EXPECT_GE(s.host_threads, 1);
#if defined(KOKKOS_ENABLE_OPENMP)
  EXPECT_TRUE(s.host_openmp);
#endif
}
