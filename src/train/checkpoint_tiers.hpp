#pragma once
// Checkpoint storage tiers (docs/architecture.md "Fault tolerance"):
//   tier 1  checkpoint.local_dir, every checkpoint.local_every steps (a fast
//           node-local disk or burst buffer; it must be visible to every
//           rank, as the one HDF5 file is written collectively);
//   tier 2  checkpoint.dir, every checkpoint.every steps (the parallel file
//           system).
// A resume or rollback takes the newest complete checkpoint of any tier,
// from the fastest tier that has it; the same step in the other tier is its
// copy, from which io::load_checkpoint repairs damaged chunks.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/deck/config.hpp"

namespace exa::train {

struct CheckpointTier {
  int tier = 2;     // 1 or 2
  std::string dir;  // its checkpoint directory
};

// The deck's tiers, fastest first (tier 1 only with checkpoint.local_every > 0).
std::vector<CheckpointTier> checkpoint_tiers(const deck::Config& cfg);

struct TieredCheckpoint {
  std::uint64_t step = 0;
  int tier = 2;
  std::string dir;                  // the step directory to load
  std::vector<std::string> copies;  // the same step in the other tiers
};

// The newest complete checkpoint of any tier with a step below `before`
// (nullopt: any step); nullopt when there is none. Rank-local.
std::optional<TieredCheckpoint> newest_checkpoint(const std::vector<CheckpointTier>& tiers,
                                                  std::optional<std::uint64_t> before = std::nullopt);

}  // namespace exa::train
