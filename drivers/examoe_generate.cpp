// examoe-generate: sample text from a checkpoint's model.
//
//   examoe-generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
//   mpiexec -n P examoe-generate --pp P --checkpoint DIR ...   # each rank holds 1/P of the layers
//
// Prints the prompt followed by the continuation on rank 0's stdout: bytes,
// or subwords through --tokenizer MODEL (examoe-tokenize's model). The sampling lives in src/inference/generate.cpp.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <random>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "driver_common.hpp"
#include "inference/generate.hpp"

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{
      "examoe-generate: sample text from an ExaMoE checkpoint (bytes, or subwords with --tokenizer).\n"
      "  examoe-generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] "
      "[--seed S] [--pp P]"};
  exa::inference::GenerateOptions opt;
  std::uint64_t seed = 0;
  app.add_option("--checkpoint", opt.checkpoint, "run directory, its ckpt/ directory or a step_<N> directory");
  app.add_option("--prompt", opt.prompt, "text to continue");
  app.add_option("--tokenizer", opt.tokenizer,
                 "the SentencePiece model a subword model was trained with (examoe-tokenize); default: bytes")
      ->check(CLI::ExistingFile);
  app.add_option("--max-new-tokens", opt.max_new_tokens, "tokens (bytes) to sample")
      ->capture_default_str()
      ->check(exa::driver::at_least(0));
  app.add_option("--temperature", opt.temperature, "softmax temperature; 0 = greedy")
      ->capture_default_str()
      ->check(exa::driver::at_least(0));
  app.add_option("--top-k", opt.top_k, "sample among the K most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(exa::driver::at_least(0));
  app.add_option("--pp", opt.pp,
                 "pipeline stages: each rank loads and runs only its stage's layers (must divide the ranks)")
      ->capture_default_str()
      ->check(exa::driver::at_least(1));
  CLI::Option* seed_opt =
      app.add_option("--seed", seed, "random seed: the same seed gives the same text (default: a fresh one, printed)");
  if (const int rc = exa::driver::parse(app, argc, argv, mpi.rank(), "examoe-generate"); rc >= 0) return rc;
  try {
    EXA_REQUIRE(!opt.checkpoint.empty(),
                "no checkpoint given: pass --checkpoint DIR (a run directory, its ckpt/ directory or a step_<N> "
                "directory)");
    if (seed_opt->count() == 0) {
      if (mpi.rank() == 0) seed = (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
      MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
      if (mpi.rank() == 0) fmt::print(stderr, "examoe-generate: seed {} (pass --seed {} to repeat)\n", seed, seed);
    }
    opt.seed = seed;
    const std::string text = exa::inference::generate(opt, MPI_COMM_WORLD);
    if (mpi.rank() == 0) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    return 0;
  } catch (const exa::Error& e) {
    exa::driver::print_error(mpi.rank(), "examoe-generate", e.what());
    return 1;
  }
}
