#include "core/thread_check.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <type_traits>

#include <fmt/format.h>

namespace exa {

const char* to_string(BlasThreading b) {
  switch (b) {
    case BlasThreading::sequential: return "sequential";
    case BlasThreading::pthreads: return "pthreads";
    case BlasThreading::openmp: return "OpenMP";
    default: return "unknown";
  }
}

namespace {

int blas_pool(const ThreadSetup& s) { return s.blas == BlasThreading::sequential ? 1 : std::max(1, s.blas_threads); }

bool pools_fight(const ThreadSetup& s) {
  return s.host_openmp && s.host_threads > 1 && s.blas == BlasThreading::pthreads && s.blas_threads > 1;
}

// The cores one rank may count as its own.
int core_share(const ThreadSetup& s) {
  int share = std::max(1, s.cores_bound);
  if (s.ranks_on_node > 1) share = std::min(share, std::max(1, s.node_cores / s.ranks_on_node));
  return share;
}

}  // namespace

int busy_threads(const ThreadSetup& s) {
  const int host = std::max(1, s.host_threads);
  if (pools_fight(s)) return host + blas_pool(s) - 1;
  return std::max(host, blas_pool(s));
}

int compute_cores(const ThreadSetup& s) {
  return std::min(std::max(std::max(1, s.host_threads), blas_pool(s)), core_share(s));
}

int gemm_cores(const ThreadSetup& s) { return std::min(blas_pool(s), core_share(s)); }

double peak_scale(const ThreadSetup& s) { return double(compute_cores(s)) / double(gemm_cores(s)); }

std::vector<std::string> thread_warnings(const ThreadSetup& s) {
  std::vector<std::string> out;
  if (pools_fight(s))
    out.push_back(fmt::format(
        "Kokkos OpenMP ({} threads) and a pthreads BLAS ({} threads) keep two thread pools that fight for the "
        "cores (OpenMP's idle threads spin while the BLAS computes): link an OpenMP-threaded OpenBLAS (Debian's "
        "libopenblas-openmp-dev, which scripts/setup.sh openmp installs and links), or set OPENBLAS_NUM_THREADS=1",
        s.host_threads, s.blas_threads));
  const int busy = busy_threads(s);
  if (busy > s.cores_bound)
    out.push_back(fmt::format(
        "this rank runs {} threads (Kokkos {}, BLAS {} {}) on the {} core(s) bound to it: set OMP_NUM_THREADS={} "
        "(and OPENBLAS_NUM_THREADS to the same or 1), or bind more cores to each rank (srun --cpus-per-task, "
        "mpiexec -bind-to)",
        busy, s.host_threads, s.blas_threads, to_string(s.blas), s.cores_bound, std::max(1, s.cores_bound)));
  if (s.ranks_on_node > 1 && busy * s.ranks_on_node > s.node_cores)
    out.push_back(fmt::format(
        "{} ranks x {} threads on this node's {} core(s): set OMP_NUM_THREADS={n} and OPENBLAS_NUM_THREADS={n} "
        "(cores / ranks per node), or run fewer ranks per node",
        s.ranks_on_node, busy, s.node_cores, fmt::arg("n", std::max(1, s.node_cores / s.ranks_on_node))));
  return out;
}

ThreadSetup probe_threads() {
  ThreadSetup s;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) s.cores_bound = std::max(1, CPU_COUNT(&set));
  s.node_cores = s.cores_bound;
  s.host_threads = std::max(1, static_cast<int>(Kokkos::DefaultHostExecutionSpace().concurrency()));
#if defined(KOKKOS_ENABLE_OPENMP)
  s.host_openmp = std::is_same<Kokkos::DefaultHostExecutionSpace, Kokkos::OpenMP>::value;
#endif
  using IntFn = int (*)();
  const auto parallel = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto threads = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (parallel != nullptr) {
    const int p = parallel();
    s.blas = p == 2 ? BlasThreading::openmp : p == 1 ? BlasThreading::pthreads : BlasThreading::sequential;
  }
  s.blas_threads = threads != nullptr ? std::max(1, threads()) : 0;
  return s;
}

}  // namespace exa
