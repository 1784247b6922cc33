#pragma once
// In a CUDA build every test program initialises Kokkos' CUDA backend,
// which aborts on a machine without a GPU (such as CI). The test mains call
// this first and exit with ctest's skip code instead.
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

}  // namespace exa::test
