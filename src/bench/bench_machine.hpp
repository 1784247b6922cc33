#pragma once
// What the benchmark reads about the machine it runs on: the load average
// (how clean the run was), the BLAS this process links and its thread
// count, and the sgemm peak of one core in both clocks.
#include <string>
#include <utility>

namespace exa::bench {

// The 1-minute load average (/proc/loadavg), -1 when unreadable.
double load_average();
// "OpenBLAS 0.3.21 ... core=Haswell" when this process's BLAS is OpenBLAS, else "".
std::string blas_config();
// OpenBLAS threads: pinned to `n` (default 1: one core, as the PyTorch
// side; 0 leaves the library's own setting) when this process's BLAS is
// OpenBLAS; returns the count in effect (0 = unknown BLAS).
int pin_blas_threads(int n = 1);
// Warns when OpenBLAS runs its generic kernels on a CPU with AVX2 or AVX-512
// (`blas` is blas_config()'s string).
void warn_generic_blas(const std::string& blas);
// The sgemm_peak.cpp measurement (square n x n 'N','T' fp32 gemm through the
// model's wrapper, best of repeats for `seconds`), in both clocks: returns
// {wall GFLOP/s, CPU-time GFLOP/s}.
std::pair<double, double> sgemm_peak_two_clocks(int n, double seconds);

}  // namespace exa::bench
