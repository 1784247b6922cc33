// examoe-ckpt: offline tools for ExaMoE checkpoints (docs/checkpoint-format.md).
//
//   examoe-ckpt verify DIR          every checksum (per chunk), the Merkle roots and the metadata;
//                                   exit 0 when all hold, 2 naming file, dataset and chunk when not
//   examoe-ckpt inspect DIR [--deck] metadata, layout and tensor table
//   examoe-ckpt merge-lora BASE ADAPTERS OUT
//                                   a LoRA run's adapters folded into the model they adapt, written as
//                                   an ordinary checkpoint under OUT
//
// DIR is a run directory (holding ckpt/), a checkpoint directory (its
// `latest`) or a step_<N> directory. Runs on one rank, without mpiexec.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "driver_common.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_report.hpp"
#include "inference/merge_lora.hpp"

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{"examoe-ckpt: verify, inspect or merge ExaMoE checkpoints offline"};
  app.require_subcommand(1);
  std::string dir;
  bool deck = false;
  CLI::App* verify = app.add_subcommand("verify", "check every chunk checksum, the Merkle roots and the metadata");
  verify->add_option("dir", dir, "run directory, its ckpt/ directory or a step_<N> directory")->required();
  CLI::App* inspect = app.add_subcommand("inspect", "print the metadata, layout and tensor table");
  inspect->add_option("dir", dir, "run directory, its ckpt/ directory or a step_<N> directory")->required();
  inspect->add_flag("--deck", deck, "also print the deck the checkpoint was written with");
  std::string base, adapters, out;
  CLI::App* merge = app.add_subcommand("merge-lora", "fold a LoRA run's adapters into its model: an ordinary checkpoint");
  merge->add_option("base", base, "the model the adapters were trained on (the run's train.init_from)")->required();
  merge->add_option("adapters", adapters, "the LoRA run's checkpoint (run, ckpt/ or step_<N> directory)")->required();
  merge->add_option("out", out, "checkpoint directory to write the merged model into (as step_<N>)")->required();
  if (const int rc = exa::driver::parse(app, argc, argv, mpi.rank(), "examoe-ckpt"); rc >= 0) return rc;
  try {
    EXA_REQUIRE(mpi.size() == 1, "examoe-ckpt runs on one rank, not {}: launch it without mpiexec", mpi.size());
    if (merge->parsed()) {
      std::printf("%s\n", exa::inference::merge_lora(base, adapters, out, MPI_COMM_WORLD).c_str());
      return 0;
    }
    if (inspect->parsed()) {
      std::fputs(exa::io::format_checkpoint_info(exa::io::inspect_checkpoint(dir), deck).c_str(), stdout);
      return 0;
    }
    const auto r = exa::io::verify_checkpoint(dir);
    std::fputs(exa::io::format_verify_result(r).c_str(), r.ok() ? stdout : stderr);
    return r.ok() ? 0 : 2;
  } catch (const exa::Error& e) {
    exa::driver::print_error(mpi.rank(), "examoe-ckpt", e.what());
    return 1;
  }
}
