#include "bench/bench_machine.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <fstream>

#include "bench/bench_profile.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"

namespace exa::bench {

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  if (!(f >> l)) return -1;
  return l;
}

std::string blas_config() {
  using StrFn = char* (*)();
  std::string s;
  if (auto cfg = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) s = cfg();
  if (auto core = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) s += std::string(" core=") + core();
  return s;
}

int pin_blas_threads(int n) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  if (n > 0)
    if (auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(n);
  if (auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) return get();
  return 0;
}

void warn_generic_blas(const std::string& blas) {
#if defined(__x86_64__) || defined(__i386__)
  if (blas.find("core=Prescott") != std::string::npos &&
      (__builtin_cpu_supports("avx512f") || __builtin_cpu_supports("avx2")))
    log::warn("examoe-bench: OpenBLAS runs its generic Prescott (SSE3) kernels on a CPU with {}: gemm is several "
              "times slower than it could be, for PyTorch too; set OPENBLAS_CORETYPE={} (scripts/bench.sh does)",
              __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2",
              __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
#else
  (void)blas;
#endif
}

std::pair<double, double> sgemm_peak_two_clocks(int n, double seconds) {
  Kokkos::Profiling::pushRegion("exa::sgemm_peak");
  View2<float> a("peak_a", n, n), b("peak_b", n, n), c("peak_c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
  Kokkos::fence();
  double best_wall = 1e30, best_cpu = 1e30;
  const double stop = wall_seconds() + seconds;
  int reps = 0;
  do {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
    Kokkos::fence();
    best_wall = std::min(best_wall, wall_seconds() - w0);
    best_cpu = std::min(best_cpu, process_cpu_seconds() - c0);
    ++reps;
  } while (wall_seconds() < stop || reps < 5);
  Kokkos::Profiling::popRegion();
  const double flop = 2.0 * double(n) * n * n;
  return {flop / best_wall * 1e-9, flop / std::max(best_cpu, 1e-9) * 1e-9};
}

}  // namespace exa::bench
