#pragma once
// The seams of a tensor-parallel stage (docs/architecture.md, "Tensor
// parallelism"): column/row/replicated Linears, the vocabulary-parallel
// embedding and loss head over the grid's Tp group, and, when the routed
// experts are split too (etp = tp), the dispatcher wrapped to reduce their
// partial sums.
#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "model/seams/seams.hpp"
#include "model/stage_plan.hpp"

namespace exa::parallel {

// Collective over the grid's Tp group (builds its communicator). overlap:
// the column-parallel backward overlaps its reduction with the weight GEMM.
void use_tensor_parallel_seams(model::Seams<float>& seams, const model::StagePlan& plan,
                               const comm::ProcessGrid& grid, comm::Backend backend, bool overlap);

}  // namespace exa::parallel
