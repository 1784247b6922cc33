// examoe-bench: the training-step benchmark (docs/architecture.md,
// "Performance method"). On one rank: warmup steps, the sgemm peak of one
// core, timed steps, a per-phase and per-kernel breakdown, then PyTorch
// training the same model on the same batches (tests/reference/bench_torch.py,
// one thread) and the ratio of the two. The last stdout line is one JSON object with it all.
//
//   examoe-bench DECK.toml [--set k=v]... [--steps 5] [--warmup 2] [--no-torch]
//                [--no-kernels] [--blas-threads N] [--python /usr/bin/python3] [--torch-script PATH]
//                [--workdir DIR] [--export-batches DIR [--export-ranks N]]
//   examoe-bench DECK.toml --growth [--pairs 2] [--set k=v]... [--workdir DIR]
//
// --growth measures expert growth instead (bench/bench_growth.hpp): the
// deck's growth schedule with its distillation, the same without
// distillation, and a static run at the mean expert count, alternated
// --pairs times in this process; tokens/s by both clocks, the ratios,
// each event's stall and the teacher's share.
//
// --export-batches DIR writes DIR/cfg.json and DIR/tokens.bin (the batches
// of warmup + steps steps), measures the one-core sgemm peak and prints one
// JSON line, timing nothing: the inputs of scripts/bench.sh --cores N
// (bench/bench_export.hpp). --export-ranks N exports the global batch of N
// data-parallel ranks (train.grad_accum times N at one rank).
//
// Run it with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 (scripts/bench.sh
// does); it pins OpenBLAS to one thread itself when it can.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "comm/mpi_env.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "driver_common.hpp"
#include "bench/bench_export.hpp"
#include "bench/bench_growth.hpp"
#include "bench/bench_json.hpp"
#include "bench/bench_report.hpp"
#include "bench/bench_runner.hpp"

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{"examoe-bench: time ExaMoE's training step on one rank and compare with PyTorch on the same config"};
  std::string deck;
  std::vector<std::string> overrides;
  exa::bench::BenchOptions opt;
  bool no_torch = false, no_kernels = false;
  app.add_option("deck", deck, "TOML input deck, e.g. input/bench.toml")->required();
  app.add_option("--set", overrides, "override a deck key, e.g. --set train.micro_batch=4 (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--steps", opt.steps, "timed steps (default 5)")->check(exa::driver::at_least(1));
  app.add_option("--warmup", opt.warmup, "untimed steps before (default 2)")->check(exa::driver::at_least(0));
  app.add_flag("--no-torch", no_torch, "skip the PyTorch comparison");
  app.add_flag("--no-kernels", no_kernels, "skip the per-kernel table (Kokkos Tools callbacks)");
  app.add_option("--blas-threads", opt.blas_threads,
                 "ExaMoE's OpenBLAS threads (default 1, as the one-thread PyTorch side; set it to OMP_NUM_THREADS "
                 "with --no-torch to profile 1 rank x N threads as the trainer runs it; 0 = the library's own)")
      ->check(exa::driver::at_least(0));
  app.add_option("--python", opt.python, "interpreter for the PyTorch side (default /usr/bin/python3)");
  app.add_option("--torch-script", opt.torch_script, "default: <source>/tests/reference/bench_torch.py");
  app.add_option("--workdir", opt.workdir, "where cfg.json and tokens.bin for PyTorch go (kept; default: a "
                                           "temporary directory, removed)");
  std::string export_dir;
  app.add_option("--export-batches", export_dir, "write cfg.json and tokens.bin for PyTorch here, print the one-core "
                                                 "sgemm peak as JSON, and exit without timing");
  std::int64_t export_ranks = 1;
  app.add_option("--export-ranks", export_ranks, "with --export-batches: the batches of this many dp ranks")
      ->check(exa::driver::at_least(1));
  bool growth = false;
  int pairs = 2;
  app.add_flag("--growth", growth, "measure expert growth: the deck's schedule with and without distillation against "
                                   "a static run at the mean expert count");
  app.add_option("--pairs", pairs, "with --growth: how many times the three runs alternate (default 2)")
      ->check(exa::driver::at_least(1));
  if (const int rc = exa::driver::parse(app, argc, argv, mpi.rank(), "examoe-bench"); rc >= 0) return rc;
  opt.torch = !no_torch;
  opt.kernels = !no_kernels;
  try {
    EXA_REQUIRE(mpi.size() == 1, "examoe-bench runs on one rank, not {}: launch it without mpiexec", mpi.size());
    if (growth) {
      const auto b = exa::bench::run_growth_bench(deck, overrides, pairs, opt.workdir);
      std::fputs(exa::bench::format_growth_report(b).c_str(), stdout);
      std::fputs((exa::bench::growth_json_line(b) + "\n").c_str(), stdout);
      std::fflush(stdout);
      return 0;
    }
    const auto cfg = exa::deck::Config::load(deck, overrides, 1);
    if (!export_dir.empty()) {
      // One rank reading dp ranks' micro-batches in turn reads the same samples.
      overrides.push_back(fmt::format("train.grad_accum={}", cfg.get_int("train.grad_accum") * export_ranks));
      const auto global = exa::deck::Config::load(deck, overrides, 1);
      std::fputs((exa::bench::export_batches(global, opt, export_dir) + "\n").c_str(), stdout);
      return 0;
    }
    const auto r = exa::bench::run_bench(cfg, opt);
    std::fputs(exa::bench::format_report(r).c_str(), stdout);
    std::fputs((exa::bench::to_json_line(r) + "\n").c_str(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const exa::Error& e) {
    exa::driver::print_error(mpi.rank(), "examoe-bench", e.what());
    return 1;
  }
}
