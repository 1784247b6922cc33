// Achieved memory bandwidth of the non-GEMM host kernels against a
// STREAM-like copy on the same threads (docs/architecture.md, "Performance
// method"). Each kernel runs on the shapes of input/bench.toml (tokens
// N = 8 x 256, d = 512, F = 1024, top-2 of 8 experts, V = 256; AdamW over a
// 16M-element tensor); bytes counted are each array read once plus each
// array written once. Best of repeated runs (a shared machine's
// preemptions only ever slow a run down). A benchmark, never a test.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bin/bench_bandwidth [seconds per kernel, default 0.5]
//
// The copy's arrays (2 x 128 MiB) are far larger than the last-level
// cache; the kernels' (8-64 MiB each) partly fit in it, so a kernel may
// exceed 100% of the copy rate.
#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/host_loops.hpp"
#include "kernels/permute.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/swiglu.hpp"

namespace {

using exa::index_t;
// Host kernels on the host execution space, whatever the build's default.
using Exec = Kokkos::DefaultHostExecutionSpace;
using HostD = Kokkos::Device<Exec, Kokkos::HostSpace>;
template <class T>
using View1 = exa::View1<T, HostD>;
template <class T>
using View2 = exa::View2<T, HostD>;

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Best run's seconds in both clocks: {wall, process CPU / threads}. On a
// loaded machine a run is preempted and its wall time lies; its CPU time
// per thread is what the cores spent on it.
std::pair<double, double> best_seconds(const std::function<void()>& f, double budget) {
  f();
  Kokkos::fence();
  const double threads = double(Exec().concurrency());
  double best = 1e30, best_cpu = 1e30;
  const auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget);
  int reps = 0;
  do {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    f();
    Kokkos::fence();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, (cpu_now() - c0) / threads);
    ++reps;
  } while (std::chrono::steady_clock::now() < stop || reps < 5);
  return {best, best_cpu};
}

template <class V>
void fill(const V& v, float lo, float hi, unsigned seed) {
  float* p = v.data();
  unsigned s = seed;
  for (std::size_t i = 0; i < v.span(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * float(s >> 8) / float(1u << 24);
  }
}

struct Row {
  std::string kernel, shape;
  double bytes = 0;
  std::pair<double, double> seconds;  // best wall, best CPU per thread
};

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  const double budget = argc > 1 ? std::atof(argv[1]) : 0.5;
  const index_t N = 2048, d = 512, F = 1024, K = 2, E = 8, V = 256, rows = N * K;
  const index_t n_adamw = index_t(1) << 24, n_copy = index_t(1) << 25;
  std::vector<Row> out;

  {
    View1<float> a("a", n_copy), b("b", n_copy);
    fill(a, -1, 1, 1);
    float* pa = a.data();
    float* pb = b.data();
    const auto t = best_seconds(
        [&] {
          exa::kernels::detail::for_host_chunks("bench::copy", Exec(), n_copy, [=](index_t i0, index_t i1) {
            for (index_t i = i0; i < i1; ++i) pb[i] = pa[i];
          });
        },
        budget);
    out.push_back({"copy (STREAM-like)", fmt::format("{}", n_copy), 8.0 * double(n_copy), t});
  }
  {
    View1<float> p("p", n_adamw), g("g", n_adamw), m("m", n_adamw), v("v", n_adamw);
    fill(p, -1, 1, 2);
    fill(g, -1, 1, 3);
    exa::kernels::AdamWHyper h;
    out.push_back({"adamw step", fmt::format("{}", n_adamw), 28.0 * double(n_adamw),
                   best_seconds([&] { exa::kernels::adamw_step(p, g, m, v, h); }, budget)});
  }
  {
    View2<float> a("a", rows, F), b("b", rows, F), hh("h", rows, F), dh("dh", rows, F), da("da", rows, F),
        db("db", rows, F);
    fill(a, -4, 4, 4);
    fill(b, -1, 1, 5);
    fill(dh, -1, 1, 6);
    const std::string shape = fmt::format("{}x{}", rows, F);
    const double e = double(rows * F);
    out.push_back({"swiglu forward", shape, 12.0 * e,
                   best_seconds([&] { exa::kernels::swiglu_forward(a, b, hh); }, budget)});
    out.push_back({"swiglu backward", shape, 20.0 * e,
                   best_seconds([&] { exa::kernels::swiglu_backward(a, b, dh, da, db); }, budget)});
  }
  {
    View2<float> x("x", N, d), y("y", N, d), dy("dy", N, d), dx("dx", N, d);
    View1<float> w("w", d), dw("dw", d), rstd("rstd", N);
    fill(x, -1, 1, 7);
    fill(w, 0.5, 1.5, 8);
    fill(dy, -1, 1, 9);
    const std::string shape = fmt::format("{}x{}", N, d);
    const double e = double(N * d);
    out.push_back({"rmsnorm forward", shape, 8.0 * e,
                   best_seconds([&] { exa::kernels::rmsnorm_forward(x, w, y, rstd); }, budget)});
    out.push_back({"rmsnorm backward", shape, 20.0 * e,
                   best_seconds([&] { exa::kernels::rmsnorm_backward(x, w, rstd, dy, dx, dw, false); }, budget)});
  }
  {
    View2<float> logits("logits", N, V), dlogits("dlogits", N, V);
    View1<float> lse("lse", N);
    Kokkos::View<std::int64_t*, exa::Layout, HostD> targets("targets", N);
    fill(logits, -8, 8, 10);
    Kokkos::deep_copy(targets, 3);
    const std::string shape = fmt::format("{}x{}", N, V);
    const double e = double(N * V);
    out.push_back({"softmax/LSE (CE forward)", shape, 4.0 * e,
                   best_seconds([&] { exa::kernels::cross_entropy_forward(logits, targets, lse); }, budget)});
    out.push_back({"softmax (CE backward)", shape, 8.0 * e,
                   best_seconds([&] { exa::kernels::cross_entropy_backward(logits, targets, lse, 1.0, N, dlogits); },
                                budget)});
  }
  {
    Kokkos::View<int**, exa::Layout, HostD> topk("topk", N, K);
    for (index_t n = 0; n < N; ++n)
      for (index_t j = 0; j < K; ++j) topk(n, j) = int((n * 3 + j * 5) % E);
    auto plan = exa::kernels::permute_plan(topk, int(E), 0);
    Kokkos::fence();
    View2<float> x("x", N, d), xp("xp", rows, d), dxp("dxp", rows, d), dx("dx", N, d), y("y", N, d),
        dgates("dgates", N, K),
        gates("gates", N, K);
    fill(x, -1, 1, 11);
    fill(gates, 0, 1, 12);
    auto token_of = Kokkos::subview(plan.token_of, Kokkos::make_pair(index_t(0), rows));
    const std::string shape = fmt::format("{}x{} -> {}x{}", N, d, rows, d);
    const double tok = double(N * d), perm = double(rows * d);
    out.push_back({"permute forward", shape, 4.0 * (tok + perm),
                   best_seconds([&] { exa::kernels::permute_forward(x, token_of, xp); }, budget)});
    out.push_back({"permute backward", shape, 4.0 * (tok + perm),
                   best_seconds([&] { exa::kernels::permute_backward(xp, plan.row_of, dx); }, budget)});
    out.push_back({"unpermute forward", shape, 4.0 * (tok + perm),
                   best_seconds([&] { exa::kernels::unpermute_forward(xp, gates, plan.row_of, y); }, budget)});
    out.push_back({"unpermute backward", shape, 4.0 * (tok + 2 * perm),
                   best_seconds([&] { exa::kernels::unpermute_backward(y, xp, gates, plan.row_of, dxp, dgates); },
                                budget)});
  }

  const double copy_wall = out[0].bytes / out[0].seconds.first * 1e-9;
  const double copy_cpu = out[0].bytes / out[0].seconds.second * 1e-9;
  std::printf("bench_bandwidth: %s, %d thread(s); best of runs within %.2f s each; wall and CPU-time rates\n",
              Exec::name(), int(Exec().concurrency()), budget);
  std::printf("%-26s %-20s %8s %9s %8s %8s %9s %8s %8s\n", "kernel", "shape", "MB", "wall ms", "GB/s", "of copy",
              "CPU ms", "GB/s", "of copy");
  for (const auto& r : out) {
    const double gw = r.bytes / r.seconds.first * 1e-9, gc = r.bytes / r.seconds.second * 1e-9;
    std::printf("%-26s %-20s %8.1f %9.3f %8.1f %7.0f%% %9.3f %8.1f %7.0f%%\n", r.kernel.c_str(), r.shape.c_str(),
                r.bytes * 1e-6, r.seconds.first * 1e3, gw, 100.0 * gw / copy_wall, r.seconds.second * 1e3, gc,
                100.0 * gc / copy_cpu);
  }
  return 0;
}
