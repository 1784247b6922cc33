// LSH attention (kernels/lsh_attention.hpp) against full causal attention
// (kernels/attention.hpp): forward + backward of one layer's heads (B = 1,
// 4 query and 4 key/value heads of 64, d = 256) for T = 1k ... 16k. For
// each T it prints both times, the workspace each call allocates (the
// memory ledger's peak over the call: full attention's score tiles, LSH's
// sorts and rotations), and at the end the exponent p of time ~ T^p fitted
// by least squares over log-log, and the smallest T where LSH is faster.
// Full attention grows as T^2; LSH's sort is linear (a counting sort) and
// its windows are fixed, so its exponent should be near 1. A benchmark,
// never a test.
//
//   OMP_NUM_THREADS=2 build/bin/bench_lsh_attention [max_T] [bucket] [hashes]
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/memory_ledger.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/lsh_attention.hpp"

namespace {

using V4 = Kokkos::View<float****, Kokkos::LayoutRight, exa::Device>;
using V3 = Kokkos::View<float***, Kokkos::LayoutRight, exa::Device>;

constexpr int kH = 4, kHkv = 4, kHd = 64;

void fill(const V4& x, std::uint32_t seed) {
  auto h = Kokkos::create_mirror_view(x);
  std::uint32_t s = seed;
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = float((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  Kokkos::deep_copy(x, h);
}

struct Sample {
  double seconds = 0;
  double workspace_mib = 0;
};

// Best of `reps` timed runs (after one warm-up) of f, and the workspace
// peak of one run.
template <class F>
Sample measure(F&& f, int reps) {
  f();
  Kokkos::fence();
  const auto before = exa::MemoryLedger::snapshot()[int(exa::MemCategory::Workspace)].current;
  exa::MemoryLedger::restart_peaks();
  Sample s{1e300, 0};
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Kokkos::fence();
    s.seconds = std::min(s.seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto peak = exa::MemoryLedger::snapshot()[int(exa::MemCategory::Workspace)].peak;
  s.workspace_mib = double(peak - before) / (1 << 20);
  return s;
}

// Least-squares slope of log(y) against log(x).
double exponent(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = double(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = std::log(x[i]), b = std::log(y[i]);
    sx += a, sy += b, sxx += a * a, sxy += a * b;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  const int max_T = argc > 1 ? std::atoi(argv[1]) : 16384;
  exa::kernels::LshConfig cfg;
  cfg.bucket = argc > 2 ? std::atoi(argv[2]) : 64;
  cfg.hashes = argc > 3 ? std::atoi(argv[3]) : 2;
  cfg.chunks_before = 1;
  exa::MemoryLedger::install();
  std::printf("attention forward+backward, B 1, H %d, Hkv %d, hd %d; lsh: bucket %d, hashes %d, chunks_before %d; "
              "%s\n",
              kH, kHkv, kHd, cfg.bucket, cfg.hashes, cfg.chunks_before, Kokkos::DefaultExecutionSpace::name());
  std::printf("%7s %12s %12s %9s %14s %14s\n", "T", "full (ms)", "lsh (ms)", "full/lsh", "full ws (MiB)",
              "lsh ws (MiB)");
  std::vector<double> Ts, full_t, lsh_t;
  int crossover = 0;
  for (int T = 1024; T <= max_T; T *= 2) {
    V4 q("q", 1, T, kH, kHd), k("k", 1, T, kHkv, kHd), v("v", 1, T, kHkv, kHd), out("out", 1, T, kH, kHd);
    V4 dout("dout", 1, T, kH, kHd), dq("dq", 1, T, kH, kHd), dk("dk", 1, T, kHkv, kHd), dv("dv", 1, T, kHkv, kHd);
    V3 lse("lse", 1, kH, T);
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    fill(dout, 4);
    const int reps = T <= 4096 ? 3 : 1;
    const Sample full = measure(
        [&] {
          exa::kernels::attention_forward(q, k, v, out, lse);
          exa::kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv);
        },
        reps);
    const Sample lsh = measure(
        [&] {
          exa::kernels::lsh_attention_forward(q, k, v, out, lse, cfg);
          exa::kernels::lsh_attention_backward(dout, q, k, v, out, lse, dq, dk, dv, cfg);
        },
        reps);
    std::printf("%7d %12.1f %12.1f %9.2f %14.2f %14.2f\n", T, 1e3 * full.seconds, 1e3 * lsh.seconds,
                full.seconds / lsh.seconds, full.workspace_mib, lsh.workspace_mib);
    std::fflush(stdout);
    if (!crossover && lsh.seconds < full.seconds) crossover = T;
    Ts.push_back(T);
    full_t.push_back(full.seconds);
    lsh_t.push_back(lsh.seconds);
  }
  if (Ts.size() >= 2)
    std::printf("fitted time ~ T^p: full p = %.2f, lsh p = %.2f\n", exponent(Ts, full_t), exponent(Ts, lsh_t));
  if (crossover)
    std::printf("lsh is faster from T = %d on (the smallest T measured where it is)\n", crossover);
  else
    std::printf("lsh was not faster at any T measured\n");
  return 0;
}
