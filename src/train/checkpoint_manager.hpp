#pragma once
// CheckpointManager: every checkpoint tier of a run in one place
// (docs/architecture.md, "Checkpoints"): when each tier is due, writing it
// (tier 0 in node memory, tier 1 on a local disk, tier 2 on the parallel
// file system, in the background with checkpoint.async), resuming from the
// newest one that verifies, and going back to the newest before a bad step.
//
// It knows nothing of the model beyond its parameter store: the Trainer
// supplies what a checkpoint holds besides the tensors, and takes back what
// a load restores, through CheckpointSource.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/deck/config.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/parameter_store.hpp"
#include "train/async_checkpoint.hpp"
#include "train/checkpoint_tiers.hpp"
#include "train/memory_checkpoint.hpp"

namespace exa::train {

struct CheckpointSource {
  // Step, tokens, data cursor, schedule, layout, balancing state after
  // `steps_done` steps.
  std::function<io::CheckpointMeta(std::int64_t steps_done)> meta;
  std::function<io::OptimizerState()> moments;  // Views aliasing the optimizer's
  // Runs `write` with the experts in global order (they may have been
  // re-placed), moving them back afterwards.
  std::function<void(const std::function<void()>& write)> in_global_order;
  // The Trainer's state after a load of any tier.
  std::function<void(const io::CheckpointMeta& meta)> restore;
  // Optional: called before a checkpoint of step `step` is read from disk,
  // so that the Trainer can rebuild its model for that step (expert growth:
  // the experts per layer depend on it), which then calls rebind().
  std::function<void(std::uint64_t step)> prepare;
};

// Which tiers are due after a step.
struct CheckpointsDue {
  bool tier0 = false, tier1 = false, tier2 = false;
  bool any() const { return tier0 || tier1 || tier2; }
};

class CheckpointManager {
 public:
  // Collective over world (tier 0 picks its buddies).
  CheckpointManager(const deck::Config& cfg, const comm::ProcessGrid& grid, MPI_Comm world,
                    model::ParameterStore& store, CheckpointSource source);

  // checkpoint.resume: the newest step of any tier that verifies, tier 0
  // first; a run that is not resumed drops any tier-0 snapshot left.
  void resume();
  // checkpoint.async: the background writer, its buffers sized now.
  void start_async_writer();

  // After `steps_done` steps of `steps`; `stop`: a scheduler's stop signal
  // (tier 2 is then written whatever checkpoint.every says).
  CheckpointsDue due(std::int64_t steps_done, std::int64_t steps, bool stop) const;
  // Writes what `due` names, fastest tier first. `last`: the run's last
  // checkpoint, which an async writer never skips.
  void save(const CheckpointsDue& due, std::int64_t steps_done, bool last);

  // Tier 2 after `steps_done` steps; its step directory.
  std::string save_tier2(std::int64_t steps_done, bool last);
  // Loads `path` (a step directory, a run's ckpt/ directory or its
  // `latest`), repairing damaged chunks from `copies`.
  void load(const std::string& path, const std::vector<std::string>& copies = {});
  // resilience.nan_policy = "rollback": loads the newest checkpoint of any
  // tier before `bad_step` (1-based); returns its step.
  std::uint64_t rollback(std::int64_t bad_step);
  // The end of run(): the last write is complete; tier 0 is dropped when
  // the run is complete (a stopped run keeps it to resume from).
  void finish(bool complete);
  // The parameters now live in `store` (a rebuilt model: expert growth).
  // Collective: tier 0's job is made again for the new tensors, and the
  // async writer's buffers are sized for them.
  void rebind(model::ParameterStore& store);
  // A background write in flight is complete: before any other HDF5 call
  // (HDF5 is not thread-safe here; a distillation teacher's snapshot).
  void wait_for_writes();
  // Fault injection: this rank's node memory is gone.
  void lose_held(int rank) { memory_->lose_held(rank); }

  std::string dir() const;  // tier 2's checkpoint directory

 private:
  void save_tier0(std::int64_t steps_done);
  void save_tier1(std::int64_t steps_done);
  bool resume_from_memory();

  const deck::Config& cfg_;
  const comm::ProcessGrid& grid_;
  MPI_Comm world_;
  model::ParameterStore* store_;
  CheckpointSource source_;
  std::int64_t every_ = 0, local_every_ = 0;
  int keep_ = 0;
  std::vector<CheckpointTier> tiers_;  // fastest first; tier 2 last
  // LoRA from train.init_from: the checkpoints hold the adapters only.
  bool adapters_only_ = false;
  std::vector<io::CheckpointTensor> tensors() const;  // what a checkpoint holds of the store
  std::unique_ptr<MemoryCheckpoint> memory_;
  std::unique_ptr<AsyncCheckpointer> async_;
};

}  // namespace exa::train
