#pragma once
// Silent-data-corruption check of the data-parallel replicas
// (resilience.replica_check_every = k; docs/architecture.md "Fault
// tolerance"). Every k steps, after the optimizer step, the ranks that hold
// the same piece of a tensor compare a checksum (kernels/checksum.hpp) of
// it; a rank whose copy differs from the others holds corrupt values.
//
// What is compared is what truly is replicated
// (parallel::data::DataParallel::replica_values), over the tensor's group (the
// Data group; the ExpertData group for the routed experts):
//   zero 0    the master values (the optimizer's and the checkpoint's, the
//             same on every replica). A corrupt copy is repaired by sending
//             the tensor from a rank of the majority (more than half of the
//             group agreeing). Without a majority (2 replicas, or a tie)
//             nothing says which copy is right: the run stops naming the
//             tensor and the ranks, and advises resuming from the last
//             checkpoint.
//   zero 1/2  the working copy, allgathered from the master parts after the
//             step (a check step waits for that gather instead of letting
//             it land during the next forward). The master parts are the
//             truth and each is held once, so the repair re-gathers the
//             working copy from them: it works with 2 replicas too. The
//             majority, when there is one, only names the corrupt rank. A
//             corrupt master part is not visible here (the gather copies it
//             to every replica alike); the checkpoint's checksums guard it.
//   zero 3    no rank holds a whole copy: refused with a message.
// The check repeats after a repair: a copy that still differs stops the run.
// Each check is a metrics record {"event": "replica_check", ...}; a mismatch
// is also a warning on the corrupt rank naming itself and the tensor.
//
// Fault injection for the tests: EXAMOE_FAULT_FLIP_AT_STEP=N flips bit 30
// (the exponent's highest) of the middle element of one tensor's replicated
// values on world rank EXAMOE_FAULT_RANK (default 0) after the update of
// step N (1-based, as logged), before that step's check. The tensor is
// EXAMOE_FAULT_FLIP_TENSOR (a global name), by default the rank's first
// tensor with elements.
#include <mpi.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/process_grid.hpp"
#include "core/deck/config.hpp"
#include "parallel/data/data_parallel.hpp"

namespace exa::train {

class ReplicaCheck {
 public:
  // exa::Error when the check is on and the layout has no replicated copy.
  ReplicaCheck(const deck::Config& cfg, const comm::ProcessGrid& grid, int zero);

  bool enabled() const { return every_ > 0; }
  bool due(std::int64_t steps_done) const { return every_ > 0 && steps_done % every_ == 0; }

  // Collective over the world: compares, repairs and re-checks the replicas
  // after `steps_done` steps; returns the metrics record. exa::Error on every
  // rank when a mismatch cannot be repaired.
  nlohmann::json run(std::int64_t steps_done, parallel::data::DataParallel& dp);

  // EXAMOE_FAULT_FLIP_AT_STEP (see above); rank-local.
  void inject(std::int64_t steps_done, parallel::data::DataParallel& dp);

 private:
  struct Verdict;
  // Checksums and compares every tensor over its group; `report` logs the
  // mismatches and plans the repairs (the check after a repair only lists).
  Verdict compare(parallel::data::DataParallel& dp, std::int64_t steps_done, bool report);

  const comm::ProcessGrid& grid_;
  MPI_Comm world_;
  int zero_ = 0;
  std::int64_t every_ = 0;
  bool injected_ = false;
};

}  // namespace exa::train
