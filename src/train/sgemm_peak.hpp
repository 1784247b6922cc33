#pragma once
// The sgemm rate these cores reach, measured at start-up through the same
// gemm wrapper the model uses: the denominator of MFU. Measuring beats a
// datasheet figure: it reflects the BLAS, the thread count and the clock
// this job actually got.
namespace exa::train {

// GFLOP/s of a square fp32 gemm of size n, best of repeated calls within
// about `seconds` of wall time.
double measure_sgemm_gflops(int n = 1024, double seconds = 0.3);

}  // namespace exa::train
