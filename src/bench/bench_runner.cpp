#include "bench/bench_runner.hpp"

#include <algorithm>
#include <tuple>

#include "bench/bench_kernels.hpp"
#include "bench/bench_machine.hpp"
#include "bench/bench_phases.hpp"
#include "bench/bench_profile.hpp"
#include "bench/bench_step.hpp"
#include "bench/bench_torch.hpp"
#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"
#include "model/precision.hpp"
#include "train/flops.hpp"

namespace exa::bench {

BenchResult run_bench(const deck::Config& cfg, const BenchOptions& opt) {
  EXA_REQUIRE(opt.steps >= 1, "examoe-bench: --steps must be at least 1, not {}", opt.steps);
  EXA_REQUIRE(opt.warmup >= 0, "examoe-bench: --warmup must be at least 0, not {}", opt.warmup);
  for (const char* k : {"parallel.tp", "parallel.pp", "parallel.cp", "parallel.ep"})
    EXA_REQUIRE(cfg.get_int(k) == 1, "examoe-bench runs one rank: {} = {}; set {} = 1", k, cfg.get_int(k), k);
  model::use_deck_precision(cfg);
  BenchResult r;
  r.deck = cfg.deck_path();
  r.steps = opt.steps;
  r.warmup = opt.warmup;
  r.exec_space = default_exec_space();
  r.precision = cfg.get_string("precision.compute");
  r.matmuls = model::describe_precision();
  r.blas_threads = pin_blas_threads(opt.blas_threads);
  r.blas = blas_config();
  warn_generic_blas(r.blas);
  r.load_before = load_average();

  Step step(cfg);
  const auto& m = step.mcfg;
  r.micro_batch = step.micro_batch;
  r.grad_accum = step.grad_accum;
  r.seq_len = m.seq_len;
  r.tokens_per_step = step.micro_batch * step.grad_accum * m.seq_len;
  r.params = step.store.local_numel();
  const train::FlopCount fc = train::count_flops(m);
  r.active_params = fc.active_params;
  r.flops_per_token = fc.per_token_train;
  r.attn_flops_per_token = fc.per_token_train - 6 * fc.active_params;
  log::info("examoe-bench: {} on 1 rank ({}, BLAS threads {}): {:.2f}M parameters ({:.2f}M active per token), "
            "{} tokens per step, {:.1f} MFLOP per token; {} warmup + {} timed steps; load average {:.2f}",
            r.deck, r.exec_space, r.blas_threads, double(r.params) / 1e6, r.active_params / 1e6,
            r.tokens_per_step, r.flops_per_token / 1e6, r.warmup, r.steps, r.load_before);

  for (std::int64_t s = 0; s < opt.warmup; ++s) {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    const auto [loss, imb] = step.run(s);
    r.losses.push_back(loss);
    log::info("examoe-bench: warmup step {}: {:.3f} s wall, {:.3f} s CPU, loss {:.4f}", s, wall_seconds() - w0,
              process_cpu_seconds() - c0, loss);
  }
  std::tie(r.sgemm_gflops, r.sgemm_gflops_cpu) = sgemm_peak_two_clocks(1024, 0.5);
  log::info("examoe-bench: sgemm peak (n = 1024, one core): {:.1f} GFLOP/s wall, {:.1f} in CPU time",
            r.sgemm_gflops, r.sgemm_gflops_cpu);

  phase_timers().reset();
  if (opt.kernels) {
    r.have_profile = KernelProfiler::start();
    if (!r.have_profile) log::warn("examoe-bench: a Kokkos Tools library is loaded: no per-kernel table");
    KernelProfiler::reset();
  }
  for (std::int64_t s = opt.warmup; s < opt.warmup + opt.steps; ++s) {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    const auto [loss, imb] = step.run(s);
    const double dw = wall_seconds() - w0, dc = process_cpu_seconds() - c0;
    r.step.wall.push_back(dw);
    r.step.cpu.push_back(dc);
    r.losses.push_back(loss);
    r.imbalance = std::max(r.imbalance, imb);
    log::info("examoe-bench: step {}: {:.3f} s wall, {:.3f} s CPU ({:.1f} / {:.1f} tokens/s), loss {:.4f}", s, dw,
              dc, double(r.tokens_per_step) / dw, double(r.tokens_per_step) / dc, loss);
  }
  const KernelTable kt = r.have_profile ? KernelProfiler::kernels() : KernelTable{};
  const Times times = region_times(r.have_profile);
  KernelProfiler::stop();
  std::tie(r.sgemm_gflops_after, r.sgemm_gflops_cpu_after) = sgemm_peak_two_clocks(1024, 0.5);
  r.load_after = load_average();

  summarise(r.step);
  const double tok = double(r.tokens_per_step);
  r.tokens_per_s = tok / r.step.wall_median;
  r.tokens_per_s_best = tok / r.step.wall_best;
  r.tokens_per_s_cpu = tok / r.step.cpu_median;
  r.tokens_per_s_cpu_best = tok / r.step.cpu_best;
  r.gflops = r.flops_per_token * r.tokens_per_s * 1e-9;
  r.gflops_cpu = r.flops_per_token * r.tokens_per_s_cpu * 1e-9;
  r.mfu = r.sgemm_gflops > 0 ? r.gflops / r.sgemm_gflops : 0;
  r.mfu_cpu = r.sgemm_gflops_cpu > 0 ? r.gflops_cpu / r.sgemm_gflops_cpu : 0;

  const double n = double(opt.steps);
  r.phases = phase_rows(times, kt, r.have_profile, n);
  r.kernels = kernel_rows(kt, n);
  attribute_matmul_flops(m, r);

  if (opt.torch) {
    run_torch(cfg, opt, step.tokens_log, r);
    if (r.torch.ran) {
      r.ratio = r.tokens_per_s_cpu / r.torch.tokens_per_s_cpu;
      r.ratio_wall = r.tokens_per_s / r.torch.tokens_per_s;
      r.ratio_best = r.tokens_per_s_cpu_best / r.torch.tokens_per_s_cpu_best;
      r.ratio_wall_best = r.tokens_per_s_best / r.torch.tokens_per_s_best;
    } else {
      log::warn("examoe-bench: no PyTorch comparison: {}", r.torch.error);
    }
  }
  return r;
}

}  // namespace exa::bench
