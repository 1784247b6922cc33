// GoogleTest entry point for MPI tests (run by ctest under mpiexec): MPI,
// then Kokkos, for the whole program. Only rank 0 prints its report, but a
// failure on any rank fails the run, and a skip on any rank (none failing)
// makes the run a skip (exit_code in harness/gpu_guard.hpp).
#include <gtest/gtest.h>

#include "comm/mpi_env.hpp"
#include "core/runtime.hpp"
#include "harness/gpu_guard.hpp"

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  if (exa::test::gpu_required_but_missing()) return exa::test::kSkipReturnCode;
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = 0;
  {
    exa::KokkosRuntime kokkos(argc, argv);
    rc = RUN_ALL_TESTS();
  }
  // Every rank returns the same code, so mpiexec's is that code: a
  // failure on any rank wins over a skip on any rank.
  int local = exa::test::exit_code(rc, *::testing::UnitTest::GetInstance());
  int worst[2] = {local != 0 && local != exa::test::kSkipReturnCode ? 1 : 0,
                  local == exa::test::kSkipReturnCode ? 1 : 0};
  int any[2] = {0, 0};
  MPI_Allreduce(worst, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any[0] ? 1 : any[1] ? exa::test::kSkipReturnCode : 0;
}
