// examoe: the training driver, plus the `eval` and `convert` subcommands.
// Parses the command line, reads the deck, builds objects and calls one
// function; nothing testable lives here.
//
//   examoe DECK.toml [--set k=v]... [--check] [--ranks N] [--keys [--format markdown]] [--version]
//     (exit 0; 1 on an error; 75 after SIGTERM/SIGUSR1 stopped it with a checkpoint)
//   examoe eval --checkpoint DIR --tokens FILE [--tokenizer MODEL] [--batch B] [--seq-len T] [--pp P]
//   examoe convert --text FILE --out FILE.tok [--dtype uint16|uint32]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "comm/mpi_env.hpp"
#include "core/build_info.hpp"
#include "core/deck/config.hpp"
#include "core/deck/schema.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/runtime.hpp"
#include "abort_job.hpp"
#include "driver_common.hpp"
#include "io/token_shard.hpp"
#include "inference/evaluate_checkpoint.hpp"
#include "kernels/onednn_matmul.hpp"
#include "plan/auto_layout.hpp"
#include "plan/memory_fit.hpp"
#include "train/preflight.hpp"
#include "train/federated.hpp"
#include "train/trainer.hpp"

namespace {

std::string version_text() {
  const std::string low = exa::kernels::onednn_available()
                              ? exa::kernels::onednn_describe()
                              : std::string("not in this build (no oneDNN; precision.compute = fp32 only)");
  return fmt::format("examoe {} (git {})\nKokkos {} backends: {} (default: {})\nMPI: {}\nbf16/fp16 products: {}",
                     exa::version_string(), exa::git_hash(), exa::kokkos_version(), exa::kokkos_backends(),
                     exa::default_exec_space(), exa::mpi_library_version(), low);
}

struct EvalArgs {
  exa::inference::EvalOptions opt;
};

struct ConvertArgs {
  std::string text, out, dtype = "uint16";
};

int run_eval(const EvalArgs& a, int rank) {
  EXA_REQUIRE(!a.opt.checkpoint.empty(),
              "no checkpoint given: pass --checkpoint DIR (a run directory, its ckpt/ directory or a step_<N> "
              "directory)");
  EXA_REQUIRE(!a.opt.tokens_file.empty(),
              "no tokens file given: pass --tokens FILE (a token shard .tok, an HDF5 file .h5 or a text file)");
  const auto report = exa::inference::evaluate_checkpoint(a.opt, MPI_COMM_WORLD);
  if (rank == 0) {
    fmt::print("{}\n", exa::inference::to_json_line(report));
    std::fflush(stdout);
  }
  return 0;
}

// Rank 0 converts (one writer per file); every rank exits alike.
int run_convert(const ConvertArgs& a, int rank) {
  std::string error;
  std::int64_t n = 0;
  if (rank == 0) {
    try {
      EXA_REQUIRE(!a.text.empty(), "no input given: pass --text FILE (any text file; its bytes become the tokens)");
      EXA_REQUIRE(!a.out.empty(), "no output given: pass --out FILE.tok");
      // (io's own messages about text files speak of the deck's data.path.)
      std::error_code ec;
      EXA_REQUIRE(std::filesystem::is_regular_file(a.text, ec), "--text {}: no such file", a.text);
      EXA_REQUIRE(std::filesystem::file_size(a.text, ec) > 0, "--text {}: the file is empty; there is nothing to convert",
                  a.text);
      n = exa::io::convert_text_to_shard(a.text, a.out, exa::io::parse_token_dtype(a.dtype));
    } catch (const exa::Error& e) {
      error = e.what();
    }
  }
  int len = static_cast<int>(error.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  error.resize(static_cast<std::size_t>(len));
  if (len > 0) MPI_Bcast(error.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!error.empty()) throw exa::Error(error);
  exa::log::info("examoe convert: wrote {} tokens ({}, vocabulary 256) from {} to {}", n, a.dtype, a.text, a.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{
      "ExaMoE: pre-train Mixture-of-Experts transformers.\n"
      "  examoe DECK.toml [--set k=v]... [--check] [--ranks N]    train (launch with mpiexec for more ranks)\n"
      "  examoe eval --checkpoint DIR --tokens FILE [--tokenizer MODEL] [--batch B] [--seq-len T] [--pp P]\n"
      "  examoe convert --text FILE --out FILE.tok [--dtype uint16|uint32]"};
  std::string deck_path;
  std::vector<std::string> overrides;
  bool check_only = false, version = false, keys = false;
  int ranks = 0;
  app.add_option("deck", deck_path, "TOML input deck (see input/)");
  // One value per --set, so `--set a=1 deck.toml` does not swallow the deck.
  app.add_option("--set", overrides, "override a deck key, e.g. --set train.steps=100 (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--check", check_only,
               "validate the deck and what it points at (data, directories, the checkpoint to resume, the "
               "layout), print the resolved configuration and exit");
  app.add_option("--ranks", ranks, "with --check: validate for N ranks instead of the MPI world size")
      ->check(CLI::Range(1, 1 << 24));
  app.add_flag("--keys", keys, "list every deck key with its type, accepted values, default and meaning");
  std::string keys_format = "text";
  app.add_option("--format", keys_format, "with --keys: text (default) or markdown (docs/decks.md)")
      ->check(CLI::IsMember({"text", "markdown"}))
      ->needs("--keys");
  app.add_flag("--version", version, "print version, git hash, Kokkos version and backends, MPI library");

  EvalArgs ev;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "mean cross-entropy (nats/token, no aux losses) of a checkpoint's model over a token file, as one JSON line");
  eval->add_option("--checkpoint", ev.opt.checkpoint, "run directory, its ckpt/ directory or a step_<N> directory");
  eval->add_option("--tokens", ev.opt.tokens_file,
                   "token shard (.tok), HDF5 file (.h5/.hdf5, dataset \"tokens\") or text file (bytes)");
  eval->add_option("--batch", ev.opt.batch, "windows per forward pass (default: the run's train.micro_batch)")
      ->check(exa::driver::at_least(1));
  eval->add_option("--tokenizer", ev.opt.tokenizer,
                   "SentencePiece model that encodes a text file (default: the checkpoint's data.tokenizer)");
  eval->add_option("--seq-len", ev.opt.seq_len, "window length T (default: the model's seq_len)")
      ->check(exa::driver::at_least(1));
  eval->add_option("--pp", ev.opt.pp,
                   "pipeline stages: each rank loads and runs only its stage's layers (must divide the ranks)")
      ->check(exa::driver::at_least(1));

  ConvertArgs cv;
  CLI::App* convert = app.add_subcommand("convert", "tokenise a text file at byte level into a token shard");
  convert->add_option("--text", cv.text, "input text file");
  convert->add_option("--out", cv.out, "output token shard, e.g. FILE.tok");
  convert->add_option("--dtype", cv.dtype, "token width in the shard: uint16 (default) or uint32");
  app.require_subcommand(0, 1);

  if (const int rc = exa::driver::parse(app, argc, argv, mpi.rank(), "examoe"); rc >= 0) return rc;
  if (version) {
    exa::log::info("{}", version_text());
    return 0;
  }
  if (keys) {
    exa::log::info("{}", keys_format == "markdown" ? exa::deck::schema_markdown() : exa::deck::schema_reference());
    return 0;
  }
  // Past the deck every rank validated alike, an error may be one rank's
  // alone (driver_common.hpp, abort_job).
  bool running = false;
  std::string run_dir;  // where a rank's error is written too
  try {
    if (*eval || *convert) {
      const char* sub = *eval ? "eval" : "convert";
      EXA_REQUIRE(deck_path.empty() && overrides.empty() && !check_only && ranks == 0,
                  "`examoe {}` takes no deck, --set, --check or --ranks (see examoe {} --help)", sub, sub);
      return *eval ? run_eval(ev, mpi.rank()) : run_convert(cv, mpi.rank());
    }
    EXA_REQUIRE(!deck_path.empty(), "no input deck given: run `examoe input/tiny.toml` (see examoe --help)");
    EXA_REQUIRE(ranks == 0 || check_only,
                "--ranks {} only works with --check; to run on {} ranks, launch `mpiexec -n {} examoe ...`", ranks,
                ranks, ranks);
    // Every rank validates (the result is the same everywhere, so all exit
    // alike); only rank 0 prints.
    auto config = exa::deck::Config::load(deck_path, overrides, ranks > 0 ? ranks : mpi.size());
    std::string planned;
    if (config.get_bool("parallel.auto")) {
      // The planner picks the layout for the ranks launched (or --ranks);
      // every rank computes the same choice from the same measurements.
      auto chosen = exa::plan::choose_layout(config, ranks > 0 ? ranks : mpi.size(), MPI_COMM_WORLD);
      config = std::move(chosen.config);
      planned = std::move(chosen.summary);
      if (!check_only) exa::log::info("{}", planned);
    }
    if (check_only) {
      // What would stop the run once the job starts: data, directories, the
      // checkpoint to resume, the layout (the output stays valid TOML).
      const auto found = exa::train::preflight(config);
      std::string text = config.to_toml() + "\n# --check found:\n";
      if (!planned.empty()) text += "#   " + planned + "\n";
      for (const auto& line : found) text += "#   " + line + "\n";
      for (const auto& line : exa::plan::memory_fit_report(config)) text += "#   " + line + "\n";
      exa::log::info("{}", text);
      return 0;
    }
    exa::log::info("{}", config.to_toml());
    running = true;
    run_dir = config.get_string("output.run_dir");
    int sig = 0;
    std::int64_t step = 0;
    if (config.get_int("federated.sites") > 1) {
      const auto res = exa::train::run_federated(config, MPI_COMM_WORLD);
      sig = res.signal;
      step = res.step;
    } else {
      exa::train::Trainer trainer(config, MPI_COMM_WORLD);
      trainer.run();
      sig = trainer.stopped_by();
      step = trainer.step();
    }
    if (sig != 0) {
      exa::log::info("examoe: stopped at step {} of {} on {} (checkpoint written); exit {}: requeue the job, it "
                     "resumes from the checkpoint with checkpoint.resume = true",
                     step, config.get_int("train.steps"), strsignal(sig), exa::train::kStopExitCode);
      return exa::train::kStopExitCode;
    }
    return 0;
  } catch (const exa::Error& e) {
    if (running && mpi.size() > 1) exa::driver::abort_job(mpi.rank(), "examoe", e.what(), run_dir);
    exa::driver::print_error(mpi.rank(), "examoe", e.what());
    return 1;
  }
}
