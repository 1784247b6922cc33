#include "bench/bench_json.hpp"

#include <nlohmann/json.hpp>

#include "core/build_info.hpp"

namespace exa::bench {

std::string to_json_line(const BenchResult& r) {
  using nlohmann::json;
  auto timing = [](const Timing& t) {
    return json{{"wall", t.wall}, {"cpu", t.cpu}, {"wall_median", t.wall_median}, {"wall_best", t.wall_best},
                {"cpu_median", t.cpu_median}, {"cpu_best", t.cpu_best}};
  };
  json j;
  j["event"] = "bench";
  j["deck"] = r.deck;
  j["version"] = version_string();
  j["git"] = git_hash();
  j["exec_space"] = r.exec_space;
  j["precision"] = r.precision;
  j["matmuls"] = r.matmuls;
  j["blas_threads"] = r.blas_threads;
  j["blas"] = r.blas;
  j["ranks"] = 1;
  j["tokens_per_step"] = r.tokens_per_step;
  j["micro_batch"] = r.micro_batch;
  j["grad_accum"] = r.grad_accum;
  j["seq_len"] = r.seq_len;
  j["params"] = r.params;
  j["active_params"] = r.active_params;
  j["flops_per_token"] = r.flops_per_token;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  j["step_s"] = timing(r.step);
  j["tokens_per_s"] = r.tokens_per_s;
  j["tokens_per_s_best"] = r.tokens_per_s_best;
  j["tokens_per_s_cpu"] = r.tokens_per_s_cpu;
  j["tokens_per_s_cpu_best"] = r.tokens_per_s_cpu_best;
  j["gflops"] = r.gflops;
  j["gflops_cpu"] = r.gflops_cpu;
  j["sgemm_gflops"] = r.sgemm_gflops;
  j["sgemm_gflops_cpu"] = r.sgemm_gflops_cpu;
  j["sgemm_gflops_after"] = r.sgemm_gflops_after;
  j["sgemm_gflops_cpu_after"] = r.sgemm_gflops_cpu_after;
  j["mfu"] = r.mfu;
  j["mfu_cpu"] = r.mfu_cpu;
  j["load_before"] = r.load_before;
  j["load_after"] = r.load_after;
  j["losses"] = r.losses;
  j["imbalance"] = r.imbalance;
  json ph = json::array();
  for (const auto& p : r.phases) {
    json e{{"phase", p.name}, {"depth", p.depth}, {"cpu", p.cpu}, {"wall", p.wall}};
    if (p.leaf) e.update(json{{"gemm", p.gemm}, {"kernels", p.kernels}, {"copy", p.copy}, {"host", p.host}});
    ph.push_back(e);
  }
  j["phases"] = ph;
  if (r.have_profile) {
    json ks = json::array();
    for (const auto& k : r.kernels)
      ks.push_back({{"kernel", k.kernel}, {"cpu", k.cpu}, {"wall", k.wall}, {"calls", k.calls}, {"phases", k.phases}});
    j["kernels"] = ks;
    j["gemm"] = {{"cpu", r.gemm_cpu}, {"gflop", r.gemm_gflop}, {"gflops", r.gemm_gflops}};
    j["attention"] = {{"fwd_cpu", r.attn_fwd_cpu}, {"fwd_gflop", r.attn_fwd_gflop}, {"fwd_gflops", r.attn_fwd_gflops},
                      {"bwd_cpu", r.attn_bwd_cpu}, {"bwd_gflops", r.attn_bwd_gflops}};
  }
  if (r.torch.ran) {
    j["torch"] = json::parse(r.torch.json);
    j["torch"]["load_before"] = r.torch.load_before;
    j["torch_tokens_per_s"] = r.torch.tokens_per_s;
    j["torch_tokens_per_s_cpu"] = r.torch.tokens_per_s_cpu;
    j["ratio"] = r.ratio;
    j["ratio_wall"] = r.ratio_wall;
    j["ratio_best"] = r.ratio_best;
    j["ratio_wall_best"] = r.ratio_wall_best;
  } else {
    j["torch"] = nullptr;
    if (!r.torch.error.empty()) j["torch_error"] = r.torch.error;
  }
  return j.dump();
}

}  // namespace exa::bench
