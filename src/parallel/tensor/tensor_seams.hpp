#pragma once
// The seams of a tensor-parallel stage (docs/architecture.md, "Tensor
// parallelism"): column/row/replicated Linears, the vocabulary-parallel
// embedding and loss head over the grid's Tp group, and, when the routed
// experts are split too (etp = tp), the dispatcher wrapped to reduce their
// partial sums.
#include "model/seams/seams.hpp"
#include "parallel/layout.hpp"

namespace exa::parallel::tensor {

// Collective over the grid's Tp group (builds its communicator); a no-op
// when tp = 1. Its collectives use comm.backend; with comm.overlap the
// column-parallel backward overlaps its reduction with the weight GEMM.
void use_tensor_parallel(model::Seams<float>& seams, const ParallelLayout& layout);

}  // namespace exa::parallel::tensor
