#include "train/checkpoint_manager.hpp"

#include "train/init_from.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"
#include "train/deck_paths.hpp"

namespace exa::train {

namespace fs = std::filesystem;

CheckpointManager::CheckpointManager(const deck::Config& cfg, const comm::ProcessGrid& grid, MPI_Comm world,
                                     model::ParameterStore& store, CheckpointSource source)
    : cfg_(cfg),
      grid_(grid),
      world_(world),
      store_(&store),
      source_(std::move(source)),
      every_(cfg.get_int("checkpoint.every")),
      local_every_(cfg.get_int("checkpoint.local_every")),
      keep_(static_cast<int>(cfg.get_int("checkpoint.keep"))),
      tiers_(checkpoint_tiers(cfg)),
      adapters_only_(checkpoints_hold_adapters_only(cfg)),
      memory_(std::make_unique<MemoryCheckpoint>(cfg, grid, world, saved_tensors(store, adapters_only_))) {}

std::string CheckpointManager::dir() const { return deck_checkpoint_dir(cfg_); }

std::vector<io::CheckpointTensor> CheckpointManager::tensors() const { return saved_tensors(*store_, adapters_only_); }

void CheckpointManager::resume() {
  if (!cfg_.get_bool("checkpoint.resume")) {
    memory_->remove_all("a run that is not resumed starts afresh");
    return;
  }
  // Expert growth: tier 0's newest snapshot may be of a grown model; build
  // it first, so that its tensors match (a disk tier's load does the same).
  if (source_.prepare)
    if (const auto step = memory_->newest_step()) source_.prepare(*step);
  if (resume_from_memory()) return;
  if (tiers_.size() > 1) {
    if (const auto c = newest_checkpoint(tiers_)) {
      load(c->dir, c->copies);
      log::info("checkpoint: step {} taken from tier {} ({}){}", c->step, c->tier, c->dir,
                c->copies.empty() ? std::string(", no copy in another tier")
                                  : fmt::format(", copy in {}", fmt::join(c->copies, ", ")));
    } else {
      log::info("checkpoint.resume: no checkpoint in any tier yet, starting from step 0");
    }
  } else if (!io::list_checkpoints(dir()).empty()) {
    load(dir());
  } else {
    log::info("checkpoint.resume: no checkpoint under {} yet, starting from step 0", dir());
  }
}

void CheckpointManager::start_async_writer() {
  if (!cfg_.get_bool("checkpoint.async")) return;
  async_ = std::make_unique<AsyncCheckpointer>(world_, cfg_.get_string("checkpoint.async_policy") == "skip"
                                                           ? AsyncCheckpointer::Policy::skip
                                                           : AsyncCheckpointer::Policy::wait);
  async_->prepare(tensors(), source_.moments());
}

CheckpointsDue CheckpointManager::due(std::int64_t steps_done, std::int64_t steps, bool stop) const {
  CheckpointsDue d;
  d.tier0 = memory_->due(steps_done);
  d.tier1 = local_every_ > 0 && steps_done % local_every_ == 0;
  d.tier2 = stop || (every_ > 0 && (steps_done % every_ == 0 || steps_done == steps));
  return d;
}

void CheckpointManager::save(const CheckpointsDue& due, std::int64_t steps_done, bool last) {
  if (due.tier0) save_tier0(steps_done);
  if (due.tier2) save_tier2(steps_done, last);
  if (due.tier1) save_tier1(steps_done);
}

void CheckpointManager::save_tier0(std::int64_t steps_done) {
  ScopedRegion region("io/checkpoint", true);
  const io::CheckpointMeta meta = source_.meta(steps_done);
  const io::OptimizerState state = source_.moments();
  source_.in_global_order([&] { memory_->save(tensors(), state, meta); });
}

void CheckpointManager::save_tier1(std::int64_t steps_done) {
  ScopedRegion region("io/checkpoint", true);
  const io::CheckpointMeta meta = source_.meta(steps_done);
  const io::OptimizerState state = source_.moments();
  io::SaveOptions so;
  so.keep = keep_;
  source_.in_global_order([&] {
    const double t0 = wall_seconds();
    const std::string d = io::save_checkpoint(tiers_.front().dir, tensors(), &state, meta, world_, so);
    log::info("checkpoint: wrote tier 1 {} in {:.3f} s", d, wall_seconds() - t0);
  });
}

std::string CheckpointManager::save_tier2(std::int64_t steps_done, bool last) {
  ScopedRegion region("io/checkpoint", true);
  const io::CheckpointMeta meta = source_.meta(steps_done);
  const io::OptimizerState state = source_.moments();
  io::SaveOptions so;
  so.keep = keep_;
  std::string out;
  // An async snapshot is taken inside, before the experts move back.
  source_.in_global_order([&] {
    if (async_) {
      if (async_->start(dir(), tensors(), state, meta, so, last))
        log::info("checkpoint: step {} snapshot taken, writing it in the background", steps_done);
      out = (fs::path(dir()) / io::checkpoint_dir_name(meta.step)).string();
      return;
    }
    const double t0 = wall_seconds();
    out = io::save_checkpoint(dir(), tensors(), &state, meta, world_, so);
    log::info("checkpoint: wrote {} in {:.3f} s", out, wall_seconds() - t0);
  });
  return out;
}

void CheckpointManager::load(const std::string& path, const std::vector<std::string>& copies) {
  if (async_) async_->wait();  // only one thread may call HDF5
  ScopedRegion region("io/checkpoint", true);
  if (source_.prepare) source_.prepare(io::inspect_checkpoint(io::resolve_checkpoint(path)).meta.step);
  const io::OptimizerState state = source_.moments();
  source_.restore(io::load_checkpoint(path, tensors(), &state, world_, {copies}));
}

std::uint64_t CheckpointManager::rollback(std::int64_t bad_step) {
  const auto c = newest_checkpoint(tiers_, static_cast<std::uint64_t>(bad_step));
  EXA_REQUIRE(c.has_value(),
              "step {} is not finite and resilience.nan_policy = \"rollback\", but {} holds no checkpoint before it "
              "to go back to: set checkpoint.every (so that one exists) or nan_policy = \"skip\"",
              bad_step, dir());
  load(c->dir, c->copies);
  return c->step;
}

bool CheckpointManager::resume_from_memory() {
  const auto c = memory_->newest();
  if (!c) return false;
  const auto other = newest_checkpoint(tiers_);
  if (other && other->step > c->step) {
    log::info("checkpoint: tier 0 holds step {}, older than tier {}'s step {}: resuming from tier {}", c->step,
              other->tier, other->step, other->tier);
    return false;
  }
  ScopedRegion region("io/checkpoint", true);
  try {
    source_.restore(memory_->load(*c, tensors(), source_.moments()));
  } catch (const Error& e) {
    log::warn("checkpoint: {}", e.what());
    log::info("checkpoint: tier 0 step {} does not verify; falling back to {}", c->step,
              other ? fmt::format("tier {} step {}", other->tier, other->step) : std::string("step 0 (no other tier)"));
    return false;
  }
  log::info("checkpoint: step {} taken from tier 0 (memory, written by {} ranks)", c->step, c->world);
  return true;
}

void CheckpointManager::rebind(model::ParameterStore& store) {
  if (async_) async_->wait();
  store_ = &store;
  memory_ = std::make_unique<MemoryCheckpoint>(cfg_, grid_, world_, saved_tensors(store, adapters_only_));
  if (async_) async_->prepare(saved_tensors(store, adapters_only_), source_.moments());
}

void CheckpointManager::wait_for_writes() {
  if (async_) async_->wait();
}

void CheckpointManager::finish(bool complete) {
  if (async_) async_->wait();  // the last checkpoint is complete before run() returns
  if (complete) memory_->remove_all("the run is complete");
}

}  // namespace exa::train
