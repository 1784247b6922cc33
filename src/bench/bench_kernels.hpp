#pragma once
// Where the step's time goes, by kernel: the profiler's (phase, kernel)
// table summed per kernel, with the phases each ran in, and the FLOP rates
// of the two kinds of matmul work (gemm, attention).
#include <vector>

#include "bench/bench_profile.hpp"
#include "bench/bench_result.hpp"
#include "model/model_config.hpp"

namespace exa::bench {

// One row per kernel, per step (`steps` timed steps), largest CPU time first;
// `phases` names its three largest phases (and how many more).
std::vector<KernelRow> kernel_rows(const KernelTable& kt, double steps);

// Fills r's gemm and attention FLOP counts, CPU times and rates (and the
// gflop of their kernel rows) from r.kernels. Every gemm is a model matmul
// (6 x active params per token), and the attention kernels do the causal
// score and value products (q.k and p.v over j <= i: 4 hd FLOPs per pair
// forward, twice that backward). Needs r.active_params, r.tokens_per_step,
// r.micro_batch and r.grad_accum.
void attribute_matmul_flops(const model::ModelConfig& m, BenchResult& r);

}  // namespace exa::bench
