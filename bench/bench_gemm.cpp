// GFLOP/s of ExaMoE's gemm wrapper (exa::kernels::linear_forward and the two
// backward products, fp32, LayoutRight) against raw cblas_sgemm on the same
// row-major shapes. The wrapper must lose at most 5% to cblas.
//
//   OPENBLAS_NUM_THREADS=1 build/bin/bench_gemm --benchmark_repetitions=10 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//
// Each benchmark reports mean/median/stddev plus "max" and "min" over the
// repetitions; on a shared machine compare the "max" GFLOP/s (least
// disturbed repetition) of exa_linear and cblas_sgemm for the same shape.
//
// Shapes are the model's linears: x[M,K] W[N,K] -> y[M,N] (y = x W^T),
// flops = 2 M N K per product.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "kernels/gemm.hpp"

#if defined(EXAMOE_HAVE_CBLAS)
#include <cblas.h>
#endif

namespace {

struct Shape {
  const char* name;
  int M, K, N;  // x[M,K], W[N,K], y[M,N]
};

// tokens x d_model -> FFN/attention widths of the model configurations
const Shape kShapes[] = {
    {"2048x512x1536", 2048, 512, 1536},  // fused q/k/v or w1|w3, d=512
    {"2048x512x1024", 2048, 512, 1024},  // expert w1, F = 2d
    {"4096x1024x512", 4096, 1024, 512},  // w2 / wo, in = 1024
    {"2048x512x256", 2048, 512, 256},    // small expert / GQA k,v
};

// Which product of a linear layer: forward y = x W^T, backward dx = dy W,
// backward dW = dy^T x. Row-major (m, n, k) of each and the cblas transposes.
enum class Op { Forward, BackwardDx, BackwardDw };

struct Problem {
  exa::View2<float> x, W, y;  // x[M,K], W[N,K], y[M,N]
  explicit Problem(const Shape& s)
      : x("x", s.M, s.K), W("W", s.N, s.K), y("y", s.M, s.N) {
    Kokkos::deep_copy(x, 0.5f);
    Kokkos::deep_copy(W, 0.25f);
    Kokkos::deep_copy(y, 1.0f);
  }
};

void set_flops(benchmark::State& state, const Shape& s) {
  const double flops = 2.0 * s.M * s.N * double(s.K);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_exa(benchmark::State& state, Shape s, Op op) {
  Problem p(s);
  for (auto _ : state) {
    switch (op) {
      case Op::Forward:  // y[M,N] = x[M,K] W[N,K]^T
        exa::kernels::linear_forward(p.x, p.W, p.y);
        break;
      case Op::BackwardDx:  // dx[M,K] = dy[M,N] W[N,K]
        exa::kernels::gemm('N', 'N', 1.0f, p.y, p.W, 0.0f, p.x);
        break;
      case Op::BackwardDw:  // dW[N,K] = dy[M,N]^T x[M,K]
        exa::kernels::gemm('T', 'N', 1.0f, p.y, p.x, 0.0f, p.W);
        break;
    }
    Kokkos::fence();
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

#if defined(EXAMOE_HAVE_CBLAS)
void BM_cblas(benchmark::State& state, Shape s, Op op) {
  Problem p(s);
  const int M = s.M, N = s.N, K = s.K;
  float* x = p.x.data();
  float* W = p.W.data();
  float* y = p.y.data();
  for (auto _ : state) {
    switch (op) {
      case Op::Forward:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, W, K, 0.0f, y, N);
        break;
      case Op::BackwardDx:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, y, N, W, K, 0.0f, x, K);
        break;
      case Op::BackwardDw:
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, y, N, x, K, 0.0f, W, K);
        break;
    }
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}
#endif

// Best-of-repetitions: on a shared machine the fastest repetition is the
// least disturbed one (for GFLOP/s read "max", for times "min").
double stat_max(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }
double stat_min(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

void register_all() {
  const struct {
    Op op;
    const char* name;
  } ops[] = {{Op::Forward, "fwd"}, {Op::BackwardDx, "bwd_dx"}, {Op::BackwardDw, "bwd_dW"}};
  for (const auto& o : ops)
    for (const Shape& s : kShapes) {
      const std::string tag = std::string(o.name) + "/" + s.name;
      benchmark::RegisterBenchmark(("exa_linear/" + tag).c_str(), BM_exa, s, o.op)
          ->Unit(benchmark::kMillisecond)
          ->ComputeStatistics("max", stat_max)
          ->ComputeStatistics("min", stat_min);
#if defined(EXAMOE_HAVE_CBLAS)
      // cblas needs host pointers: only when ExaMoE's device memory is the host's.
      if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, exa::MemSpace>::accessible)
        benchmark::RegisterBenchmark(("cblas_sgemm/" + tag).c_str(), BM_cblas, s, o.op)
            ->Unit(benchmark::kMillisecond)
            ->ComputeStatistics("max", stat_max)
            ->ComputeStatistics("min", stat_min);
#endif
    }
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
