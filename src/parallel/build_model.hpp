#pragma once
// build_model: the one place that decides, from the process grid, which
// layer range this rank holds and which implementation fills each seam of
// the model (docs/architecture.md, "Seams"). Tensor, expert, context and
// pipeline parallelism each add their choice here. Expert parallelism
// (grid ep > 1) gives this rank E/ep consecutive experts and the
// all-to-all dispatcher; tensor parallelism (tp > 1) its part of every
// tensor-parallel dimension and the TP seams (parallel/tensor/). Context
// parallelism (grid cp > 1) puts ring or all-to-all attention over the Cp
// group into the attention seam (context/context_parallel.hpp). Pipeline
// parallelism (grid pp > 1) gives the rank its stage's layers
// (pipeline/stage_split.hpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "model/model_config.hpp"
#include "model/stage_model.hpp"
#include "parallel/context/context_parallel.hpp"
#include "parallel/expert/expert_placement.hpp"
#include "parallel/pipeline/deferred_weights.hpp"

namespace exa::parallel {

// This rank's plan. exa::Error naming the dimension when ep does not divide
// the experts or tp an extent it splits (the deck refuses the layouts this
// build cannot run before any of this is built). Pipeline
// parallelism (pp > 1) gives the rank its stage's layers: `layers_per_stage`
// counts, or the balanced split (pipeline/stage_split.hpp) when empty;
// virtual_stages > 1 (the interleaved schedule) its v chunks instead
// (model::StagePlan::interleaved).
model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                            const std::vector<std::int64_t>& layers_per_stage = {}, int virtual_stages = 1);

// How the expert all-to-all moves token rows: `backend` (the counts always
// use MPI) and, with `hierarchical` (comm.hierarchical_a2a), in two stages
// over the Ep group's node-local and inter-node communicators.
struct ExpertComm {
  comm::Backend backend = comm::Backend::Mpi;
  bool hierarchical = false;
  // Expert re-placement (moe.replace_every): the placement the dispatcher
  // follows, owned by the trainer, which changes it between steps.
  std::shared_ptr<const ExpertPlacement> placement;
};

// Tensor parallelism's communication: `overlap` (comm.overlap) runs the
// column-parallel weight-gradient GEMMs during their input-gradient
// allreduce. Its collectives use ExpertComm's backend.
struct TensorComm {
  bool overlap = true;
  bool sequence_parallel = false;  // parallel.sequence_parallel (with tp > 1)
};

// This rank's pipeline stage as the model sees it: the stage split
// (pipeline.layers_per_stage, empty = balanced; virtual_stages chunks when
// interleaved) and `deferred_weights` (the zero-bubble schedule), where the
// Linear seams record their weight gradients while it defers. The
// schedule's own options are pipeline::PipelineOptions.
struct StageSplit {
  std::vector<std::int64_t> layers_per_stage;
  std::shared_ptr<pipeline::WeightGradQueue> deferred_weights;
  int virtual_stages = 1;  // pipeline.virtual_stages (interleaved)
};

// Collective over the grid's Ep group when ep > 1, its Tp group when tp > 1
// and its Cp group when cp > 1 (their communicators).
std::unique_ptr<model::StageModel<float>> build_model(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                                                      model::ModelOptions opt = {}, ExpertComm ec = {},
                                                      TensorComm tc = {}, const context::ContextOptions& co = {},
                                                      StageSplit po = {});

}  // namespace exa::parallel
