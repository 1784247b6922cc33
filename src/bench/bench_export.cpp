#include "bench/bench_export.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/bench_machine.hpp"
#include "bench/bench_step.hpp"
#include "bench/bench_torch.hpp"
#include "core/error.hpp"
#include "model/precision.hpp"
#include "train/flops.hpp"

namespace exa::bench {

std::string export_batches(const deck::Config& cfg, const BenchOptions& opt, const std::string& dir) {
  EXA_REQUIRE(!dir.empty(), "examoe-bench: --export-batches needs a directory");
  std::filesystem::create_directories(dir);
  Step step(cfg);
  const std::int64_t n_steps = opt.warmup + opt.steps;
  for (std::int64_t s = 0; s < n_steps; ++s)
    for (std::int64_t j = 0; j < step.grad_accum; ++j) step.sample(s, j);
  write_torch_inputs(cfg, step.tokens_log, dir);
  pin_blas_threads();
  // The peak of the deck's precision (bf16 runs count MFU against bf16's).
  model::use_deck_precision(cfg);
  const auto [peak, peak_cpu] = sgemm_peak_two_clocks(1024, 0.5);
  const auto& m = step.mcfg;
  return nlohmann::json{{"event", "bench_export"},
                        {"dir", dir},
                        {"tokens_per_step", step.micro_batch * step.grad_accum * m.seq_len},
                        {"flops_per_token", train::count_flops(m).per_token_train},
                        {"micro_batch", step.micro_batch},
                        {"grad_accum", step.grad_accum},
                        {"seq_len", m.seq_len},
                        {"steps", opt.steps},
                        {"warmup", opt.warmup},
                        {"sgemm_gflops", peak},
                        {"sgemm_gflops_cpu", peak_cpu},
                        {"precision", cfg.get_string("precision.compute")}}
      .dump();
}

}  // namespace exa::bench
