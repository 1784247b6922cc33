#pragma once
// The human-readable report of a benchmark run: configuration, step times
// in both clocks, rates, MFU and the PyTorch ratio, then the per-phase and
// per-kernel tables.
#include <string>

#include "bench/bench_result.hpp"

namespace exa::bench {

// Several lines, ends with a newline.
std::string format_report(const BenchResult& r);

}  // namespace exa::bench
