#pragma once
// The seams of expert parallelism (docs/architecture.md, "Expert
// parallelism"): the all-to-all dispatcher that sends each token row to the
// rank holding its expert, over the grid's Ep group.
#include <memory>

#include "model/seams/seams.hpp"
#include "parallel/expert/expert_placement.hpp"
#include "parallel/layout.hpp"

namespace exa::parallel::expert {

// A no-op when this rank holds every expert (ep = 1). Otherwise collective
// over the Ep group (builds its communicators): the token rows move over
// comm.backend (the counts always over MPI), in two stages over the node-
// local and inter-node communicators with comm.hierarchical_a2a, encoded
// with comm.a2a_compression.
// `placement` (moe.replace_every): the slots the experts sit in, owned by
// the caller, which changes it between steps; null: the home slots.
void use_expert_parallel(model::Seams<float>& seams, const ParallelLayout& layout,
                         std::shared_ptr<const ExpertPlacement> placement = nullptr);

}  // namespace exa::parallel::expert
