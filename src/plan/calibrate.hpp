#pragma once
// `examoe-plan calibrate`: the rates of the machine it runs on, measured with
// the project's own kernels, as a Cluster (docs/planner.md, "Calibration").
// Collective over the ranks it is launched on: with two or more, the
// point-to-point link between rank 0 and rank 1 is measured too.
#include <mpi.h>

#include <string>

#include "plan/cluster.hpp"

namespace exa::plan {

struct CalibrateOptions {
  int nodes = 1, devices_per_node = 0;  // 0: the ranks launched
  std::string scratch_dir = ".";        // where the write bandwidth is measured
  double seconds = 0.3;                 // per measurement
};

Cluster calibrate(const CalibrateOptions& opt, MPI_Comm comm);

}  // namespace exa::plan
