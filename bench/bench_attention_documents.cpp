// Attention over packed sequences (kernels/attention.hpp's documents)
// against the causal mask alone, at the same sequence length: forward and
// backward of one layer's heads (B = 1, 8 query and 2 key/value heads of
// 64) for T = 1024 and 2048, with documents of mean length 64 or 256
// (lengths uniform in [mean/2, 3 mean/2]) or one document (arg 0). The
// `area` counter is the share of the causal (query, key) pairs that the
// documents leave; the kernels skip the key tiles outside a query tile's
// documents, so the time should follow it down to the tiles' granularity.
// A benchmark, never a test; Google Benchmark's options apply.
//
//   OMP_NUM_THREADS=1 build/bin/bench_attention_documents
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "kernels/attention.hpp"

namespace {

using V4 = Kokkos::View<float****, Kokkos::LayoutRight, exa::Device>;
using V3 = Kokkos::View<float***, Kokkos::LayoutRight, exa::Device>;
using I2 = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, exa::Device>;

constexpr int kH = 8, kHkv = 2, kHd = 64;

void fill(const V4& x, std::uint32_t seed) {
  auto h = Kokkos::create_mirror_view(x);
  std::uint32_t s = seed;
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = float((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  Kokkos::deep_copy(x, h);
}

struct Documents {
  I2 start, end;
  double area = 1;  // visible pairs / causal pairs
};

Documents documents(int T, int mean) {
  Documents d{I2("start", 1, T), I2("end", 1, T)};
  if (mean == 0) return d;
  auto hs = Kokkos::create_mirror_view(d.start);
  auto he = Kokkos::create_mirror_view(d.end);
  std::uint32_t s = 99;
  double pairs = 0;
  for (int a = 0; a < T;) {
    const int n = std::min(T - a, mean / 2 + int(((s = s * 1664525u + 1013904223u) >> 8) % std::uint32_t(mean + 1)));
    for (int p = a; p < a + n; ++p) {
      hs(0, p) = a;
      he(0, p) = a + n;
    }
    pairs += 0.5 * double(n) * double(n + 1);
    a += n;
  }
  Kokkos::deep_copy(d.start, hs);
  Kokkos::deep_copy(d.end, he);
  d.area = pairs / (0.5 * double(T) * double(T + 1));
  return d;
}

void BM_Attention(benchmark::State& state) {
  const int T = int(state.range(0)), mean = int(state.range(1));
  V4 q("q", 1, T, kH, kHd), k("k", 1, T, kHkv, kHd), v("v", 1, T, kHkv, kHd), out("out", 1, T, kH, kHd);
  V4 dout("dout", 1, T, kH, kHd), dq("dq", 1, T, kH, kHd), dk("dk", 1, T, kHkv, kHd), dv("dv", 1, T, kHkv, kHd);
  V3 lse("lse", 1, kH, T);
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  fill(dout, 4);
  const Documents d = documents(T, mean);
  exa::kernels::AttentionOffsets at;
  if (mean > 0) at = {0, 0, d.start.data(), d.end.data(), T};
  for (auto _ : state) {
    exa::kernels::attention_forward(q, k, v, out, lse, {}, at);
    exa::kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, {}, at);
    Kokkos::fence();
  }
  state.counters["area"] = d.area;
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{1024, 2048}, {0, 256, 64}})
    ->ArgNames({"T", "doc"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
