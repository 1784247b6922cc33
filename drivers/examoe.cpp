// examoe: the training driver. Parses the command line, reads the deck,
// builds objects and calls one function; nothing testable lives here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/mpi_env.hpp"
#include "core/build_info.hpp"
#include "core/deck/config.hpp"
#include "core/deck/schema.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/runtime.hpp"
#include "train/trainer.hpp"

namespace {

std::string version_text() {
  return fmt::format("examoe {} (git {})\nKokkos {} backends: {} (default: {})\nMPI: {}", exa::version_string(),
                     exa::git_hash(), exa::kokkos_version(), exa::kokkos_backends(), exa::default_exec_space(),
                     exa::mpi_library_version());
}

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{
      "ExaMoE: pre-train Mixture-of-Experts transformers. Usage: examoe DECK.toml [--set k=v]... [--check] "
      "[--ranks N]"};
  std::string deck_path;
  std::vector<std::string> overrides;
  bool check_only = false, version = false, keys = false;
  int ranks = 0;
  app.add_option("deck", deck_path, "TOML input deck (see input/)");
  // One value per --set, so `--set a=1 deck.toml` does not swallow the deck.
  app.add_option("--set", overrides, "override a deck key, e.g. --set train.steps=100 (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--check", check_only, "validate the deck, print the resolved configuration and exit");
  app.add_option("--ranks", ranks, "with --check: validate for N ranks instead of the MPI world size")
      ->check(CLI::Range(1, 1 << 24));
  app.add_flag("--keys", keys, "list every deck key with its type, accepted values, default and meaning");
  app.add_flag("--version", version, "print version, git hash, Kokkos version and backends, MPI library");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return mpi.rank() == 0 ? app.exit(e) : (e.get_exit_code());
  }
  if (version) {
    exa::log::info("{}", version_text());
    return 0;
  }
  if (keys) {
    exa::log::info("{}", exa::deck::schema_reference());
    return 0;
  }
  try {
    EXA_REQUIRE(!deck_path.empty(), "no input deck given: run `examoe input/tiny.toml` (see examoe --help)");
    EXA_REQUIRE(ranks == 0 || check_only,
                "--ranks {} only works with --check; to run on {} ranks, launch `mpiexec -n {} examoe ...`", ranks,
                ranks, ranks);
    // Every rank validates (the result is the same everywhere, so all exit
    // alike); only rank 0 prints.
    const auto config = exa::deck::Config::load(deck_path, overrides, ranks > 0 ? ranks : mpi.size());
    exa::log::info("{}", config.to_toml());
    if (check_only) return 0;
    exa::train::Trainer trainer(config, MPI_COMM_WORLD);
    trainer.run();
    return 0;
  } catch (const exa::Error& e) {
    if (mpi.rank() == 0) fmt::print(stderr, "examoe: error: {}\n", e.what());
    return 1;
  }
}
