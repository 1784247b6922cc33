// GoogleTest entry point for MPI tests (run by ctest under mpiexec): MPI,
// then Kokkos, for the whole program. Only rank 0 prints its report, but a
// failure on any rank fails the run.
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
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
