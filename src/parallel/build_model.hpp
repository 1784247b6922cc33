#pragma once
// build_model: the one place that decides, from the process grid, which
// layer range this rank holds and which implementation fills each seam of
// the model (docs/architecture.md, "Seams"). Tensor, expert, context and
// pipeline parallelism each add their choice here; today every seam is the
// local one and the grid must be plain data parallelism.
#include <memory>

#include "comm/process_grid.hpp"
#include "model/model_config.hpp"
#include "model/stage_model.hpp"

namespace exa::parallel {

// exa::Error naming the dimension when the grid asks for a parallelism this
// build does not provide yet.
model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid);

std::unique_ptr<model::StageModel<float>> build_model(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                                                      model::ModelOptions opt = {});

}  // namespace exa::parallel
