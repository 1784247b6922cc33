#pragma once
// parallel.auto: the layout of a run chosen at start-up by the planner's
// search (docs/planner.md, "parallel.auto") for the ranks it was launched
// on, on a cluster file or on this machine measured there and then.
#include <mpi.h>

#include <string>

#include "core/deck/config.hpp"

namespace exa::plan {

struct AutoLayout {
  deck::Config config;  // the deck with the chosen layout, for `world` ranks
  std::string summary;  // what was chosen and why, for the log
};

// `cfg` has parallel.auto = true. Throws exa::Error naming the deck line
// of a layout key the deck sets (the planner chooses them), and of
// parallel.cluster when its file does not load. With parallel.cluster =
// "calibrate" the ranks of `comm` measure this machine first (collective).
AutoLayout choose_layout(const deck::Config& cfg, int world, MPI_Comm comm);

}  // namespace exa::plan
