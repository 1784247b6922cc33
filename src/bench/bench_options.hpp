#pragma once
// What examoe-bench is asked to do (its command line, less the deck).
#include <cstdint>
#include <string>

namespace exa::bench {

struct BenchOptions {
  std::int64_t steps = 5;   // timed optimizer steps
  std::int64_t warmup = 2;  // untimed steps first
  bool torch = true;        // run the PyTorch comparison
  bool kernels = true;      // per-kernel table and CPU-time phases (Kokkos Tools callbacks)
  std::string python = "/usr/bin/python3";
  std::string torch_script;  // default: <source tree>/tests/reference/bench_torch.py
  std::string workdir;       // cfg.json and tokens.bin for PyTorch (kept); default: a temporary directory
};

}  // namespace exa::bench
