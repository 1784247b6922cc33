#pragma once
// examoe-bench's engine: time the training step of a deck on one rank,
// break the time down by phase and by kernel, and compare with PyTorch
// training the same model on the same batches in the same run
// (tests/reference/bench_torch.py). docs/architecture.md, "Performance
// method".
//
//   BenchResult r = run_bench(cfg, opts);   // warmup, sgemm peak, timed steps, torch
//   std::cout << format_report(r) << to_json_line(r) << "\n";
//
// The pieces, one file each: the step (bench_step), the machine probes
// (bench_machine: load, BLAS, sgemm peak), the profiler (bench_profile),
// the phase tree (bench_phases), the kernel table (bench_kernels), the
// PyTorch run (bench_torch), the report (bench_report) and the JSON line
// (bench_json).
//
// Noise. On a shared machine a single-threaded step is stretched by
// time-slicing but never shortened. Every step, the sgemm peak and the
// PyTorch steps are therefore timed with two clocks, wall and this process's
// CPU time, and summarised by the median (the best step beside it). CPU time
// is the robust figure under load (it does not count the slices another job
// ran in), wall time the honest one on a quiet machine; their quotient is
// the share of a core the run got. The 1-minute load average before and
// after says how clean the machine was. MFU is achieved over peak in the
// same clock; the ratio to PyTorch is median over median in the same clock.
#include "bench/bench_options.hpp"
#include "bench/bench_result.hpp"
#include "core/deck/config.hpp"

namespace exa::bench {

BenchResult run_bench(const deck::Config& cfg, const BenchOptions& opt);

}  // namespace exa::bench
