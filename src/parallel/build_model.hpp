#pragma once
// build_model: the one place that decides, from the process grid, which
// layer range this rank holds and which implementation fills each seam of
// the model (docs/architecture.md, "Seams"). Tensor, expert, context and
// pipeline parallelism each add their choice here. Expert parallelism
// (grid ep > 1) gives this rank E/ep consecutive experts and the
// all-to-all dispatcher; every other seam is still the local one.
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "model/model_config.hpp"
#include "model/stage_model.hpp"
#include "parallel/pipeline/deferred_weights.hpp"

namespace exa::parallel {

// This rank's plan. exa::Error naming the dimension when the grid asks for
// a parallelism this build does not provide yet (tp, cp), or when ep does
// not divide the experts. Pipeline parallelism (pp > 1) gives the rank its
// stage's layers: `layers_per_stage` counts, or the balanced split
// (pipeline/stage_split.hpp) when empty.
model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                            const std::vector<std::int64_t>& layers_per_stage = {});

// How the expert all-to-all moves token rows: `backend` (the counts always
// use MPI) and, with `hierarchical` (comm.hierarchical_a2a), in two stages
// over the Ep group's node-local and inter-node communicators.
struct ExpertComm {
  comm::Backend backend = comm::Backend::Mpi;
  bool hierarchical = false;
};

// Collective over the grid's Ep group when ep > 1 (its communicators).
// `deferred_weights` (the zero-bubble pipeline schedule): the Linear seams
// record their weight gradients there while it defers.
std::unique_ptr<model::StageModel<float>> build_model(
    const model::ModelConfig& cfg, const comm::ProcessGrid& grid, model::ModelOptions opt = {}, ExpertComm ec = {},
    const std::vector<std::int64_t>& layers_per_stage = {},
    std::shared_ptr<pipeline::WeightGradQueue> deferred_weights = nullptr);

}  // namespace exa::parallel
