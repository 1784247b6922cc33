// The gradient codecs' encode and decode rates (kernels/topk_codec.hpp,
// kernels/wire_codec.hpp) on a 4 Mi-value payload, about the data-parallel
// gradient of input/tiny.toml: what `time.compress` is made of. A
// benchmark, never a test; Google Benchmark's options apply.
//
//   OMP_NUM_THREADS=1 build/bin/bench_codecs [--benchmark_filter=Topk]
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>

#include "core/types.hpp"
#include "kernels/topk_codec.hpp"
#include "kernels/wire_codec.hpp"

namespace {

constexpr std::int64_t kN = std::int64_t(1) << 22;

exa::View1<float> gradient() {
  exa::View1<float> g("g", std::size_t(kN));
  auto h = Kokkos::create_mirror_view(g);
  for (std::int64_t i = 0; i < kN; ++i) h(i) = float(std::sin(0.37 * double(i)) * 1e-3 * double(1 + i % 13));
  Kokkos::deep_copy(g, h);
  return g;
}

// Top-k at `ratio` per mille: encode (selection and residual) of a gradient
// whose residual starts at zero, as each step's encode sees it.
void BM_TopkEncode(benchmark::State& state) {
  const exa::kernels::TopkCodec c(double(state.range(0)) / 1000.0);
  const auto g = gradient();
  exa::View1<float> residual("r", std::size_t(kN));
  exa::View1<std::int32_t> out("out", std::size_t(c.words(kN)));
  for (auto _ : state) {
    state.PauseTiming();
    Kokkos::deep_copy(residual, 0.0f);
    Kokkos::fence();
    state.ResumeTiming();
    c.encode(g, residual, out);
  }
  state.SetItemsProcessed(state.iterations() * kN);
  state.SetBytesProcessed(state.iterations() * kN * 4);
}
BENCHMARK(BM_TopkEncode)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_TopkDecodeAdd(benchmark::State& state) {
  const exa::kernels::TopkCodec c(double(state.range(0)) / 1000.0);
  const auto g = gradient();
  exa::View1<float> residual("r", std::size_t(kN)), y("y", std::size_t(kN));
  exa::View1<std::int32_t> out("out", std::size_t(c.words(kN)));
  c.encode(g, residual, out);
  for (auto _ : state) c.decode_add(out, kN, y);
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_TopkDecodeAdd)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

// int8 blocks of 256 (the deck's default comm.quant_block), for scale.
void BM_Int8Encode(benchmark::State& state) {
  const exa::kernels::WireCodec c(exa::kernels::WireFormat::Int8, 256);
  const auto g = gradient();
  exa::View1<std::int32_t> out("out", std::size_t(c.words(kN)));
  for (auto _ : state) {
    c.encode(g, out);
    Kokkos::fence();
  }
  state.SetItemsProcessed(state.iterations() * kN);
  state.SetBytesProcessed(state.iterations() * kN * 4);
}
BENCHMARK(BM_Int8Encode)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
