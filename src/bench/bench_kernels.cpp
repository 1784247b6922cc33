#include "bench/bench_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "bench/has_prefix.hpp"

namespace exa::bench {

std::vector<KernelRow> kernel_rows(const KernelTable& kt, double steps) {
  std::map<std::string, KernelRow> by;
  std::map<std::string, std::vector<std::pair<double, std::string>>> where;
  for (const auto& [key, st] : kt) {
    auto& r = by[key.second];
    r.kernel = key.second;
    r.cpu += st.cpu / steps;
    r.wall += st.wall / steps;
    r.calls += double(st.calls) / steps;
    where[key.second].emplace_back(st.cpu, key.first);
  }
  std::vector<KernelRow> out;
  for (auto& [name, r] : by) {
    auto& w = where[name];
    std::sort(w.rbegin(), w.rend());
    for (std::size_t i = 0; i < w.size() && i < 3; ++i) r.phases += (i ? ", " : "") + w[i].second;
    if (w.size() > 3) r.phases += fmt::format(" +{}", w.size() - 3);
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const KernelRow& a, const KernelRow& b) { return a.cpu > b.cpu; });
  return out;
}

void attribute_matmul_flops(const model::ModelConfig& m, BenchResult& r) {
  const double tok = double(r.tokens_per_step);
  const double pairs = 0.5 * double(m.seq_len) * double(m.seq_len + 1);
  const double seqs = double(r.micro_batch * r.grad_accum);
  r.gemm_gflop = 6 * r.active_params * tok * 1e-9;
  r.attn_fwd_gflop = 4.0 * double(m.head_dim()) * pairs * double(m.n_heads) * seqs * double(m.n_layers) * 1e-9;
  for (auto& k : r.kernels) {
    if (k.kernel == "gemm") {
      k.gflop = r.gemm_gflop;
      r.gemm_cpu = k.cpu;
    } else if (k.kernel == "exa::attention::forward") {
      k.gflop = r.attn_fwd_gflop;
      r.attn_fwd_cpu = k.cpu;
    } else if (has_prefix(k.kernel, "exa::attention::backward")) {
      r.attn_bwd_cpu += k.cpu;
    }
  }
  if (r.gemm_cpu > 0) r.gemm_gflops = r.gemm_gflop / r.gemm_cpu;
  if (r.attn_fwd_cpu > 0) r.attn_fwd_gflops = r.attn_fwd_gflop / r.attn_fwd_cpu;
  if (r.attn_bwd_cpu > 0) r.attn_bwd_gflops = 2 * r.attn_fwd_gflop / r.attn_bwd_cpu;
}

}  // namespace exa::bench
