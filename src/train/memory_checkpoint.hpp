#pragma once
// Tier 0 of the checkpoint tiers (train/checkpoint_tiers.hpp): every
// checkpoint.memory_every steps each rank snapshots what it owns into
// shared memory and sends a copy to a buddy rank on another (pretend) node
// (io/checkpoint/memory_snapshot.hpp; docs/architecture.md "Checkpoints").
// The buddy of rank r is r + m (mod the world), m = ranks per node
// (checkpoint.memory_ranks_per_node, or the detected node split), so a
// node's ranks keep their copies on the next node. A resume takes tier 0
// when its step is the newest of any tier and it verifies; a normal end of
// the run removes the job's snapshots, a failure leaves them.
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/deck/config.hpp"
#include "io/checkpoint/memory_snapshot.hpp"

namespace exa::train {

class MemoryCheckpoint {
 public:
  // Collective over world (the buddy permutation and this launch's id).
  MemoryCheckpoint(const deck::Config& cfg, const comm::ProcessGrid& grid, MPI_Comm world,
                   const std::vector<io::CheckpointTensor>& tensors);
  bool enabled() const { return every_ > 0; }
  bool due(std::int64_t steps_done) const { return every_ > 0 && steps_done % every_ == 0; }
  int buddy() const { return buddy_; }

  // Collective: the snapshot after `meta.step` steps (a failure to write it
  // is a warning: the previous snapshot stays).
  void save(const std::vector<io::CheckpointTensor>& tensors, const io::OptimizerState& optim,
            const io::CheckpointMeta& meta);
  // Collective: the newest complete snapshot (the same on every rank), its
  // notes logged; nullopt when tier 0 is off or has none.
  std::optional<io::MemoryCandidate> newest();
  // Collective: the newest step of any of the job's segments on any rank,
  // of whatever model (expert growth builds that step's model first).
  std::optional<std::uint64_t> newest_step() const;
  // Collective: loads `c` (exa::Error on every rank when it does not verify).
  io::CheckpointMeta load(const io::MemoryCandidate& c, const std::vector<io::CheckpointTensor>& tensors,
                          const io::OptimizerState& optim);
  // Collective: removes every snapshot of this run (a run that is not
  // resumed, the normal end of one); logs how many.
  void remove_all(const char* why);
  // Fault injection: this rank's node memory goes with it.
  void lose_held(int rank);

 private:
  MPI_Comm world_;
  std::int64_t every_ = 0;
  int buddy_ = 0;
  std::uint64_t launch_ = 0;
  io::MemoryJob job_;
};

}  // namespace exa::train
