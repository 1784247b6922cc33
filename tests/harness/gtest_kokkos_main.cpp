// GoogleTest entry point for every non-MPI test: Kokkos lives for the whole
// test program, as in a real run.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include "harness/gpu_guard.hpp"

int main(int argc, char** argv) {
  if (exa::test::gpu_required_but_missing()) return exa::test::kSkipReturnCode;
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::initialize(argc, argv);
  int rc = RUN_ALL_TESTS();
  Kokkos::finalize();
  return exa::test::exit_code(rc, *::testing::UnitTest::GetInstance());
}
