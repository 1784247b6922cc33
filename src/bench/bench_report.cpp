#include "bench/bench_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace exa::bench {

namespace {

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", x);
  return s;
}

}  // namespace

std::string format_report(const BenchResult& r) {
  std::string s;
  auto line = [&](const std::string& l) { s += l + "\n"; };
  line(fmt::format("== examoe-bench: {} ==", r.deck));
  line(fmt::format("{} tokens/step (micro_batch {} x grad_accum {} x seq_len {}), {:.2f}M params, "
                   "{:.2f}M active/token, {:.1f} MFLOP/token (attention {:.1f})",
                   r.tokens_per_step, r.micro_batch, r.grad_accum, r.seq_len, double(r.params) / 1e6,
                   r.active_params / 1e6, r.flops_per_token / 1e6, r.attn_flops_per_token / 1e6));
  line(fmt::format("ExaMoE steps, wall (s): {}   median {:.3f}  best {:.3f}", list(r.step.wall), r.step.wall_median,
                   r.step.wall_best));
  line(fmt::format("ExaMoE steps, CPU  (s): {}   median {:.3f}  best {:.3f}   (core share {:.0f}%)",
                   list(r.step.cpu), r.step.cpu_median, r.step.cpu_best,
                   100 * r.step.cpu_median / std::max(r.step.wall_median, 1e-12)));
  if (r.torch.ran) {
    line(fmt::format("PyTorch steps, wall (s): {}   median {:.3f}  best {:.3f}", list(r.torch.step.wall),
                     r.torch.step.wall_median, r.torch.step.wall_best));
    line(fmt::format("PyTorch steps, CPU  (s): {}   median {:.3f}  best {:.3f}   (core share {:.0f}%)",
                     list(r.torch.step.cpu), r.torch.step.cpu_median, r.torch.step.cpu_best,
                     100 * r.torch.step.cpu_median / std::max(r.torch.step.wall_median, 1e-12)));
  }
  line(fmt::format("load average (1 min): {:.2f} before, {:.2f} after ExaMoE{}; BLAS threads {}; Kokkos {}",
                   r.load_before, r.load_after,
                   r.torch.ran ? fmt::format(", {:.2f} before PyTorch", r.torch.load_before) : std::string(),
                   r.blas_threads, r.exec_space));
  if (!r.blas.empty()) line(fmt::format("BLAS: {}", r.blas));
  line(fmt::format("precision.compute = {}: {}", r.precision, r.matmuls));
  line("");
  line(fmt::format("  {:<22} {:>12} {:>12}", "", "wall", "CPU time"));
  line(fmt::format("  {:<22} {:12.1f} {:12.1f}   (best step {:.1f} / {:.1f})", "tokens/s", r.tokens_per_s,
                   r.tokens_per_s_cpu, r.tokens_per_s_best, r.tokens_per_s_cpu_best));
  line(fmt::format("  {:<22} {:12.2f} {:12.2f}", "achieved GFLOP/s", r.gflops, r.gflops_cpu));
  line(fmt::format("  {:<22} {:12.2f} {:12.2f}   (one core, n = 1024; after the steps {:.2f} / {:.2f})",
                   r.precision + " gemm peak GFLOP/s", r.sgemm_gflops, r.sgemm_gflops_cpu, r.sgemm_gflops_after,
                   r.sgemm_gflops_cpu_after));
  line(fmt::format("  {:<22} {:11.1f}% {:11.1f}%", "MFU", 100 * r.mfu, 100 * r.mfu_cpu));
  if (r.torch.ran) {
    line(fmt::format("  {:<22} {:12.1f} {:12.1f}   (best step {:.1f} / {:.1f}; torch {}, 1 thread, sgemm {:.1f} / {:.1f})",
                     "PyTorch tokens/s", r.torch.tokens_per_s, r.torch.tokens_per_s_cpu, r.torch.tokens_per_s_best,
                     r.torch.tokens_per_s_cpu_best, r.torch.version, r.torch.sgemm_gflops, r.torch.sgemm_gflops_cpu));
    line(fmt::format("  {:<22} {:12.3f} {:12.3f}   (best/best {:.3f} / {:.3f})", "ratio ExaMoE/PyTorch",
                     r.ratio_wall, r.ratio, r.ratio_wall_best, r.ratio_best));
    line(fmt::format("  -> ExaMoE is {} PyTorch (CPU-time medians, the measure robust to load)",
                     r.ratio >= 1 ? "at least as fast as" : "SLOWER than"));
  } else {
    line(fmt::format("  PyTorch: not run{}", r.torch.error.empty() ? "" : ": " + r.torch.error));
  }
  line("");
  double step_cpu = 0, step_wall = 0;
  for (const auto& p : r.phases)
    if (p.depth == 0) {
      step_cpu += p.cpu;
      step_wall += p.wall;
    }
  const double mean_cpu = std::accumulate(r.step.cpu.begin(), r.step.cpu.end(), 0.0) / double(r.step.cpu.size());
  const double mean_wall = std::accumulate(r.step.wall.begin(), r.step.wall.end(), 0.0) / double(r.step.wall.size());
  const bool cpu = r.have_profile;
  const double denom = cpu ? mean_cpu : mean_wall;
  line(fmt::format("Per phase, s per step (mean of {} steps); share of the mean step ({:.3f} s {}); "
                   "gemm/kernels/copy/host split the phase's own CPU time",
                   r.steps, denom, cpu ? "CPU" : "wall"));
  line(fmt::format("  {:<40} {:>8} {:>8} {:>6} |{:>8} {:>8} {:>7} {:>7}", "phase", "CPU", "wall", "share", "gemm",
                   "kernels", "copy", "host"));
  for (const auto& p : r.phases) {
    const std::string name = std::string(2 * std::size_t(p.depth), ' ') + p.name;
    const double share = 100 * (cpu ? p.cpu : p.wall) / denom;
    std::string l = fmt::format("  {:<40} {:>8} {:8.4f} {:5.1f}% |", name, cpu ? fmt::format("{:8.4f}", p.cpu) : "-",
                                p.wall, share);
    if (p.leaf) l += fmt::format("{:8.4f} {:8.4f} {:7.4f} {:7.4f}", p.gemm, p.kernels, p.copy, p.host);
    line(l);
  }
  line(fmt::format("  {:<40} {:>8} {:8.4f} {:5.1f}% |", "(outside the phases)",
                   cpu ? fmt::format("{:8.4f}", std::max(0.0, mean_cpu - step_cpu)) : "-",
                   std::max(0.0, mean_wall - step_wall),
                   100 * std::max(0.0, cpu ? mean_cpu - step_cpu : mean_wall - step_wall) / denom));
  if (r.have_profile) {
    line("");
    line("Per kernel, CPU s per step (gemm = every BLAS call made through kernels/gemm.hpp)");
    line(fmt::format("  {:<36} {:>8} {:>6} {:>7} {:>8}  {}", "kernel", "CPU", "share", "calls", "GFLOP/s",
                     "phases (largest first)"));
    for (const auto& k : r.kernels) {
      if (k.cpu < 0.001 * mean_cpu) continue;
      const std::string rate = k.gflop > 0 && k.cpu > 0 ? fmt::format("{:8.2f}", k.gflop / k.cpu) : "";
      line(fmt::format("  {:<36} {:8.4f} {:5.1f}% {:7.0f} {:>8}  {}", k.kernel, k.cpu, 100 * k.cpu / mean_cpu,
                       k.calls, rate, k.phases));
    }
    line("");
    line(fmt::format("  gemm:               {:.3f} s/step for {:.1f} GFLOP -> {:.2f} GFLOP/s = {:.0f}% of the sgemm "
                     "peak (CPU time)",
                     r.gemm_cpu, r.gemm_gflop, r.gemm_gflops,
                     r.sgemm_gflops_cpu > 0 ? 100 * r.gemm_gflops / r.sgemm_gflops_cpu : 0.0));
    if (r.attn_fwd_cpu > 0)
      line(fmt::format("  attention forward:  {:.3f} s/step for {:.2f} GFLOP -> {:.2f} GFLOP/s; backward: {:.3f} s/step "
                       "for {:.2f} GFLOP -> {:.2f} GFLOP/s",
                       r.attn_fwd_cpu, r.attn_fwd_gflop, r.attn_fwd_gflops, r.attn_bwd_cpu, 2 * r.attn_fwd_gflop,
                       r.attn_bwd_gflops));
  }
  return s;
}

}  // namespace exa::bench
