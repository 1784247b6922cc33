#include "train/sgemm_peak.hpp"

#include <algorithm>

#include "core/profiling.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"

namespace exa::train {

double measure_sgemm_gflops(int n, double seconds) {
  Kokkos::Profiling::pushRegion("exa::sgemm_peak");
  View2<float> a("peak_a", n, n), b("peak_b", n, n), c("peak_c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);  // warm-up (page faults, BLAS init)
  Kokkos::fence();
  double best = 1e30;
  const double stop = wall_seconds() + seconds;
  int reps = 0;
  do {
    const double t0 = wall_seconds();
    kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
    Kokkos::fence();
    best = std::min(best, wall_seconds() - t0);
    ++reps;
  } while (wall_seconds() < stop || reps < 3);
  Kokkos::Profiling::popRegion();
  return 2.0 * double(n) * n * n / best * 1e-9;
}

}  // namespace exa::train
