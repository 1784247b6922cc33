#pragma once
// Where the step's time goes, by phase: the inclusive time of every region
// (from the profiler, or from the phase timers without it) arranged as the
// phase tree
//   io (step/io)
//   forward (step/forward) > forward/embed, forward/attn, forward/moe > forward/moe/router, ...
//   backward (step/backward) > backward/...
//   optimizer (step/optimizer) > exa::optim::adamw
// with "(rest)" rows for the time of a phase outside its sub-phases, and for
// leaves and rests the split of their exclusive CPU time into gemm, Kokkos
// kernels, deep copies and host code.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_profile.hpp"
#include "bench/bench_result.hpp"

namespace exa::bench {

// Inclusive (cpu, wall) per region name, over all timed steps.
using Times = std::map<std::string, std::pair<double, double>>;

// The regions' times since the last reset: the profiler's (both clocks)
// when it ran, else the phase timers' (wall only, CPU 0).
Times region_times(bool have_profile);

// The phase tree, per step (`steps` timed steps); the gemm/kernels/copy/host
// split is filled only when have_kernels (kt is the profiler's table).
std::vector<PhaseRow> phase_rows(const Times& t, const KernelTable& kt, bool have_kernels, double steps);

}  // namespace exa::bench
