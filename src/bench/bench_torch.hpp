#pragma once
// The PyTorch comparison: tests/reference/bench_torch.py trains the same
// model (cfg as JSON) on the same batches (the tokens the timed run used)
// for the same warmup and timed steps, on one thread, and prints one JSON
// line, read back into r.torch. A failure (no script, no interpreter, a
// bad line, a token count per step that differs from ExaMoE's) is recorded
// in r.torch.error, never thrown, so that the ExaMoE half of the report
// still prints.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_options.hpp"
#include "bench/bench_result.hpp"
#include "core/deck/config.hpp"

namespace exa::bench {

// What bench_torch.py reads: dir/cfg.json (the resolved deck) and
// dir/tokens.bin (`tokens`, int32). Throws exa::Error when either cannot be
// written.
void write_torch_inputs(const deck::Config& cfg, const std::vector<std::int32_t>& tokens, const std::string& dir);

// `tokens`: every micro-batch's inputs then targets, in step order
// (Step::tokens_log). Needs r.steps, r.warmup and r.tokens_per_step.
void run_torch(const deck::Config& cfg, const BenchOptions& opt, const std::vector<std::int32_t>& tokens,
               BenchResult& r);

}  // namespace exa::bench
