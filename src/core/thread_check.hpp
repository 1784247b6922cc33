#pragma once
// One thread pool per rank (docs/architecture.md, "Performance method"). A
// rank's cores are shared by Kokkos' host threads and the BLAS the gemm
// wrapper reaches. When that BLAS keeps its own pthreads beside an OpenMP
// Kokkos, OpenMP's idle workers spin while BLAS computes and the two pools
// fight; when threads x ranks exceed the cores bound to them, every pool
// waits for the others. thread_warnings() names both situations and the
// fix; probe_threads() reads them off this process.
#include <string>
#include <vector>

namespace exa {

enum class BlasThreading { unknown, sequential, pthreads, openmp };

struct ThreadSetup {
  int cores_bound = 1;        // CPUs in this rank's affinity mask (sched_getaffinity)
  int node_cores = 1;         // CPUs in the union of the masks of the ranks on this node
  int ranks_on_node = 1;      // ranks sharing this node
  int host_threads = 1;       // Kokkos' host execution space concurrency
  bool host_openmp = false;   // that space is Kokkos::OpenMP
  int blas_threads = 1;       // the BLAS's thread count (0: unknown)
  BlasThreading blas = BlasThreading::unknown;
};

// "OpenMP", "pthreads", "sequential" or "unknown".
const char* to_string(BlasThreading b);

// Threads the rank keeps busy: one pool of max(host, BLAS) threads when the
// BLAS runs on OpenMP's own threads (or is sequential), but host + BLAS - 1
// (the calling thread is shared) when an OpenMP Kokkos sits beside a
// pthreads BLAS, whose workers and OpenMP's spinning ones coexist.
int busy_threads(const ThreadSetup& s);

// Cores the rank's compute really gets: min(max(host, BLAS threads), cores
// bound), and no more than its share of the node's cores when ranks share them.
int compute_cores(const ThreadSetup& s);

// Cores one gemm runs on: the BLAS's threads (1 when sequential), capped like compute_cores.
int gemm_cores(const ThreadSetup& s);

// MFU's peak for a rank is the sgemm rate measured through the BLAS scaled
// to the cores the rank computes on: compute_cores / gemm_cores (1 when the
// gemm already runs on all of them, 2 for 2 OpenMP threads beside a
// one-thread BLAS).
double peak_scale(const ThreadSetup& s);

// Start-up warnings, each naming the fix; empty when the setup is coherent.
std::vector<std::string> thread_warnings(const ThreadSetup& s);

// This process alone (node_cores = cores_bound, ranks_on_node = 1): the
// affinity mask, Kokkos' host concurrency and backend, and OpenBLAS's
// threading (openblas_get_parallel / openblas_get_num_threads, looked up at
// run time; another BLAS reads as unknown).
ThreadSetup probe_threads();

}  // namespace exa
