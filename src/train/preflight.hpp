#pragma once
// `examoe DECK --check`: what would stop the run once its batch job starts,
// found before the job waits in the queue. Config::load has checked the deck
// itself; this opens what the deck points at, in this order:
//   * the layout for cfg.world_size() ranks (comm::resolve_grid_sizes: also
//     parallel.ranks_per_node) and what this build can run;
//   * data.path, read as the Trainer reads it: its format, its vocabulary
//     against model.vocab_size, and enough tokens for a training window once
//     the held-out split (at least one validation window) is set aside;
//   * output.run_dir, and checkpoint.dir when checkpoints are written or
//     resumed: an existing directory, or one that can be created, writable;
//   * checkpoint.resume: the checkpoint the run would resume from is
//     complete (format version, metadata checksum, Merkle root over the
//     datasets' checksums) and holds this model's tensors, shapes and
//     optimizer state. The tensor data itself is verified when the run loads
//     it (that reads the whole file);
//   * with [growth]: the expert counts it passes through, when, and the
//     experts per EP rank (the deck check has refused any count ep does not
//     divide).
// Writes nothing. Each problem is an exa::Error located at the deck key and
// naming the fix.
#include <string>
#include <vector>

#include "core/deck/config.hpp"

namespace exa::train {

// One line per check that passed, saying what was found.
std::vector<std::string> preflight(const deck::Config& cfg);

}  // namespace exa::train
