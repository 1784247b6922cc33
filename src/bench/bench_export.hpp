#pragma once
// examoe-bench --export-batches DIR: the inputs of a benchmark whose timed
// runs happen elsewhere (scripts/bench.sh --cores N runs the trainer on
// several ranks and PyTorch DDP). It writes DIR/cfg.json and DIR/tokens.bin,
// the micro-batches of steps 0 .. warmup + steps - 1 exactly as
// Trainer::train_step samples them at one rank (so train.grad_accum = N at
// one rank reads the same samples as dp = N ranks with grad_accum 1),
// measures the one-core sgemm peak, and returns one JSON line:
// {"event": "bench_export", tokens_per_step, flops_per_token, micro_batch,
//  grad_accum, seq_len, steps, warmup, sgemm_gflops, sgemm_gflops_cpu}.
#include <string>

#include "bench/bench_options.hpp"
#include "core/deck/config.hpp"

namespace exa::bench {

std::string export_batches(const deck::Config& cfg, const BenchOptions& opt, const std::string& dir);

}  // namespace exa::bench
