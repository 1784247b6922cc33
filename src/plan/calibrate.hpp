#pragma once
// `examoe-plan calibrate`: the rates of the machine it runs on, measured with
// the project's own kernels, as a Cluster (docs/planner.md, "Calibration").
// Collective over the ranks it is launched on: with two or more on a node,
// the link inside it (ranks 0 and 1, the node's collectives); with two or
// more nodes, the link between them (rank 0 and the next node's first).
#include <mpi.h>

#include <string>

#include "plan/cluster.hpp"

namespace exa::plan {

struct CalibrateOptions {
  // The cluster file's node count and devices per node; 0: as launched
  // (ranks sharing memory, or ranks_per_node consecutive ranks).
  int nodes = 0, devices_per_node = 0;
  int ranks_per_node = 0;  // > 0: pretend nodes of this many consecutive ranks
  std::string scratch_dir = ".";        // where the write bandwidth is measured
  double seconds = 0.3;                 // per measurement
};

Cluster calibrate(const CalibrateOptions& opt, MPI_Comm comm);

}  // namespace exa::plan
