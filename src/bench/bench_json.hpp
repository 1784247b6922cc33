#pragma once
// The machine-readable record of a benchmark run (examoe-bench's last
// stdout line; scripts/bench.sh and the tests read it): "event": "bench".
#include <string>

#include "bench/bench_result.hpp"

namespace exa::bench {

// Everything as one JSON object on one line (no newline).
std::string to_json_line(const BenchResult& r);

}  // namespace exa::bench
