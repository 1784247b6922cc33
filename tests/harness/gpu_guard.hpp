#pragma once
// In a CUDA build every test program initialises Kokkos' CUDA backend,
// which aborts on a machine without a GPU (such as CI). The test mains call
// this first and exit with ctest's skip code instead.
//
// exit_code: a program whose tests passed but one or more of them skipped
// (GTEST_SKIP) exits 77 too, which every ctest test carries as its
// SKIP_RETURN_CODE (exa_skippable_tests in tests/CMakeLists.txt): ctest
// then reports the program as skipped, not passed. A failure still exits 1
// (a skip never hides it), and a program that ran no test at all (a
// --gtest_filter that selects nothing) fails rather than passing empty.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdio>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace exa::test {

constexpr int kSkipReturnCode = 77;

inline bool gpu_required_but_missing() {
#if defined(KOKKOS_ENABLE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: skipping (this build's Kokkos needs one)\n");
    return true;
  }
#endif
  return false;
}

inline int exit_code(int run_all_tests_rc, const ::testing::UnitTest& unit) {
  if (run_all_tests_rc != 0 || unit.failed_test_count() > 0) return 1;
  if (unit.test_to_run_count() == 0) {
    std::printf("no test selected: check --gtest_filter against --gtest_list_tests\n");
    return 1;
  }
  return unit.skipped_test_count() > 0 ? kSkipReturnCode : 0;
}

}  // namespace exa::test
