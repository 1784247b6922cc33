#pragma once
// build_model: the one place that decides which implementation fills each
// seam of this rank's model (docs/architecture.md, "Seams"). The rank's
// layers, tensor-parallel part and experts are the ParallelLayout's plan; each
// strategy then puts its seams in with one use_* call:
//   expert::use_expert_parallel    the all-to-all dispatcher (ep > 1)
//   tensor::use_tensor_parallel    column/row/vocabulary-parallel linears (tp > 1)
//   context::use_context_parallel  ring or all-to-all attention (cp > 1)
//   pipeline::use_deferred_weights the zero-bubble schedule's deferred W
#include <memory>

#include "model/stage_model.hpp"
#include "parallel/expert/expert_placement.hpp"
#include "parallel/layout.hpp"

namespace exa::parallel {

// Collective over the grid's Ep group when ep > 1, its Tp group when tp > 1
// and its Cp group when cp > 1 (their communicators). `placement`: expert
// re-placement (moe.replace_every), the placement the dispatcher follows,
// owned by the caller, which changes it between steps (null: experts stay
// in their home slots).
std::unique_ptr<model::StageModel<float>> build_model(const ParallelLayout& layout, model::ModelOptions opt = {},
                                                      std::shared_ptr<const expert::ExpertPlacement> placement = nullptr);

}  // namespace exa::parallel
