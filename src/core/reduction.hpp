#pragma once
// A reduction callback: the small piece of vocabulary the optimizer (which
// calls it) and the parallel layer (which provides it, an MPI allreduce over
// its ranks) share, so that neither has to include the other
// (docs/architecture.md, "Layers").
#include <functional>

namespace exa {

// Sum of a per-rank double over the ranks (identity on one rank).
using Reduction = std::function<double(double)>;

}  // namespace exa
