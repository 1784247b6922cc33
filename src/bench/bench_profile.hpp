#pragma once
// An in-process profiler for examoe-bench, built on the Kokkos Tools
// callback interface (the one the space-time-stack and nvtx connectors use),
// so that it sees every Kokkos kernel and every profiling region without a
// line in the model or the kernels:
//
//   * every region (ScopedRegion phases such as "backward/attn" and
//     "exa::optim::adamw", the bench's own "step/..." regions) gets its
//     inclusive time;
//   * each parallel_for / parallel_reduce / parallel_scan is timed under its
//     label (exa::attention::forward, exa::permute::forward, ...);
//   * everything inside an "exa::gemm" region (kernels/gemm.hpp's wrapper
//     around KokkosBlas::gemm, i.e. the vendor BLAS call) is charged to
//     "gemm", whatever runs inside it;
//   * Kokkos::deep_copy is charged to "deep_copy";
// and kernels, gemm and copies are attributed to the innermost enclosing
// phase: any region but gemm.hpp's call markers (exa::gemm*,
// exa::grouped_linear*), or "-" outside any.
//
// Two clocks: wall time, and the CPU time of this process
// (CLOCK_PROCESS_CPUTIME_ID). On a shared machine a single-threaded run is
// stretched in wall time by time-slicing but much less in CPU time, so the
// CPU clock is the robust one there; on a quiet machine they agree.
//
// Begin/end stamps are taken on the host, so on an asynchronous device
// backend a kernel's time is its launch cost unless its phase fences;
// examoe-bench builds its model with fenced phases, and on host backends
// (Serial, OpenMP) every kernel is synchronous and the times are exact.
//
// The callbacks are global (C function pointers): one profiler per process.
// start() refuses (returns false) when a Kokkos Tools library is already
// loaded (KOKKOS_TOOLS_LIBS / --kokkos-tools-libs), so as not to displace it.
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace exa::bench {

struct KernelStat {
  double wall = 0, cpu = 0;  // seconds
  std::int64_t calls = 0;
};

// (phase, kernel) -> accumulated time and calls.
using KernelTable = std::map<std::pair<std::string, std::string>, KernelStat>;
// region name -> inclusive time and calls.
using RegionTable = std::map<std::string, KernelStat>;

// CPU time of this process, seconds.
double process_cpu_seconds();

class KernelProfiler {
 public:
  // Installs the callbacks; false (and nothing installed) when a tool
  // library is already loaded. Call after Kokkos::initialize.
  static bool start();
  // Restores the callbacks that were there before start().
  static void stop();
  static bool active();
  static void reset();
  static KernelTable kernels();
  static RegionTable regions();
};

}  // namespace exa::bench
