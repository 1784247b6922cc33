#pragma once
// Everything one examoe-bench run measured: the configuration, the step
// times in both clocks and the rates derived from them, where the time goes
// (phases, kernels), and the PyTorch side. run_bench fills it;
// format_report and to_json_line print it.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_timing.hpp"

namespace exa::bench {

struct PhaseRow {
  std::string name;  // "forward", "forward/attn", "forward/moe/experts", "forward/moe (rest)", ...
  int depth = 0;     // indentation level
  double cpu = 0;    // s per step, inclusive of sub-phases (0 without the profiler)
  double wall = 0;   // s per step, inclusive
  bool leaf = false; // the split below is filled (CPU seconds per step, exclusive of sub-phases)
  double gemm = 0, kernels = 0, copy = 0, host = 0;
};

struct KernelRow {
  std::string kernel;  // "gemm", "deep_copy" or a Kokkos kernel label
  std::string phases;  // the phases it ran in, largest first
  double cpu = 0, wall = 0;  // s per step
  double calls = 0;          // per step
  double gflop = 0;          // per step, where counted (gemm, attention); else 0
};

struct BenchResult {
  // Configuration.
  std::string deck, exec_space;
  std::string precision = "fp32", matmuls;  // precision.compute; model::describe_precision()
  std::int64_t tokens_per_step = 0, micro_batch = 0, grad_accum = 0, seq_len = 0, params = 0;
  double active_params = 0, flops_per_token = 0, attn_flops_per_token = 0;
  int blas_threads = 0;  // 0 = could not be queried
  std::string blas;      // OpenBLAS build and core (openblas_get_config/corename), "" when unknown
  std::int64_t steps = 0, warmup = 0;
  // Timing.
  Timing step;
  double tokens_per_s = 0, tokens_per_s_best = 0;          // wall, median and best step
  double tokens_per_s_cpu = 0, tokens_per_s_cpu_best = 0;  // CPU time
  double gflops = 0, gflops_cpu = 0;                       // achieved (count_flops), median step
  double sgemm_gflops = 0, sgemm_gflops_cpu = 0;           // one core, right before the timed steps
  double sgemm_gflops_after = 0, sgemm_gflops_cpu_after = 0;  // right after (a contention probe)
  double mfu = 0, mfu_cpu = 0;
  double load_before = 0, load_after = 0;  // 1-minute load averages
  std::vector<double> losses;
  double imbalance = 1;
  // Where the time goes.
  std::vector<PhaseRow> phases;
  std::vector<KernelRow> kernels;
  bool have_profile = false;
  double gemm_gflop = 0, gemm_cpu = 0, gemm_gflops = 0;  // per step; GFLOP/s in CPU time
  double attn_fwd_gflop = 0, attn_fwd_cpu = 0, attn_fwd_gflops = 0;
  double attn_bwd_cpu = 0, attn_bwd_gflops = 0;  // backward counted as 2x forward
  // PyTorch (tests/reference/bench_torch.py's JSON line).
  struct Torch {
    bool ran = false;  // false: --no-torch, or it failed (error says why)
    std::string error, json, version;
    Timing step;
    double tokens_per_s = 0, tokens_per_s_best = 0, tokens_per_s_cpu = 0, tokens_per_s_cpu_best = 0;
    double sgemm_gflops = 0, sgemm_gflops_cpu = 0, load_before = 0;
  } torch;
  // ExaMoE tokens/s over PyTorch tokens/s: median/median in CPU time (the
  // headline: robust to load) and wall time, and best/best.
  double ratio = 0, ratio_wall = 0, ratio_best = 0, ratio_wall_best = 0;
};

}  // namespace exa::bench
