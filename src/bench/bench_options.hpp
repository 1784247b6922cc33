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
  // ExaMoE's BLAS threads (OpenBLAS): 1 as the one-core PyTorch side, or
  // the OpenMP threads for a 1 rank x N threads profile (0: the library's
  // own setting, OPENBLAS_NUM_THREADS or OMP_NUM_THREADS).
  int blas_threads = 1;
  std::string python = "/usr/bin/python3";
  std::string torch_script;  // default: <source tree>/tests/reference/bench_torch.py
  std::string workdir;       // cfg.json and tokens.bin for PyTorch (kept); default: a temporary directory
};

}  // namespace exa::bench
