// The guard against deck keys that are accepted and ignored: a Trainer built
// from input/full.toml (which sets every key) and run for one step must have
// read every key of the schema, less the reserved ones, which the loader
// takes only at their default. A new key that nothing reads fails here.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/deck/config.hpp"
#include "train/trainer.hpp"

namespace {

// The keys one step of full.toml with `extra` overrides never read.
std::set<std::string> unread_after_one_step(const std::string& name, std::vector<std::string> extra) {
  const std::string run = std::string(EXAMOE_TEST_WORK_DIR) + "/deck_reads_" + name;
  std::filesystem::remove_all(run);
  // full.toml's own layout and options, on a model small enough for seconds.
  std::vector<std::string> sets = {"train.steps=1",     "model.d_model=32",   "model.d_ff=64",
                                   "model.n_heads=4",   "model.n_kv_heads=2", "model.seq_len=32",
                                   "moe.d_expert=32",   "train.micro_batch=2", "train.eval_batches=1",
                                   "output.run_dir=" + run};
  sets.insert(sets.end(), extra.begin(), extra.end());
  const auto cfg = exa::deck::Config::load(std::string(EXAMOE_SOURCE_DIR) + "/input/full.toml", sets, 1);
  {
    exa::train::Trainer trainer(cfg, MPI_COMM_WORLD);
    trainer.run();
  }
  const auto keys = cfg.unread_keys();
  return {keys.begin(), keys.end()};
}

// A key that only takes effect with a feature on (async_policy with async,
// local_dir with tier 1) counts as read when the run with that feature on
// reads it; tier 1 and async writes exclude each other, hence separate runs
// (and lora's keys are read with adapters on).
TEST(DeckReads, OneStepOfTheFullDeckReadsEveryKey) {
  auto unread = unread_after_one_step("as_is", {});
  for (const auto& variant : {std::pair<std::string, std::string>{"async", "checkpoint.async=true"},
                              {"tier1", "checkpoint.local_every=1"},
                              {"lora", "lora.rank=4"}}) {
    const auto more = unread_after_one_step(variant.first, {variant.second});
    std::set<std::string> both;
    for (const auto& k : unread)
      if (more.count(k)) both.insert(k);
    unread = both;
  }
  std::string list;
  for (const auto& k : unread) list += " " + k;
  EXPECT_TRUE(list.empty()) << "deck keys that input/full.toml's runs never read:" << list
                            << "\nread them where they take effect, or mark them reserved in "
                               "src/core/deck/schema.cpp until they do";
}

}  // namespace
