#pragma once
// probe_threads() (core/thread_check.hpp) with the node filled in: how many
// ranks share this node and how many distinct cores their affinity masks
// cover together. Collective over `world`.
#include <mpi.h>

#include "core/thread_check.hpp"

namespace exa::comm {

ThreadSetup probe_node_threads(MPI_Comm world);

}  // namespace exa::comm
