#pragma once
// Who holds the same box of a tensor: top-k's residuals differ between the
// ranks holding one box (data-parallel replicas, tensor-parallel copies of
// a replicated tensor), so every tier that keeps or moves them numbers
// those ranks in world-rank order (io/checkpoint.hpp).
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "model/shard.hpp"

namespace exa::io {

struct BoxHolders {
  std::int64_t holder = -1;  // this rank's index among the ranks holding its box; -1: it holds none
  std::int64_t holders = 0;  // how many ranks hold this rank's box (0: none)
  // Over every box of the tensor some rank holds: the fewest and the most
  // ranks holding one (0 when no rank holds any).
  std::int64_t fewest = 0, most = 0;
};

// One entry per tensor, `boxes[t]` this rank's box of tensor t (nullopt:
// none). The same tensor list on every rank. Collective over comm (one
// allgather of box signatures).
std::vector<BoxHolders> box_holders(const std::vector<std::optional<model::Box>>& boxes, MPI_Comm comm);

}  // namespace exa::io
