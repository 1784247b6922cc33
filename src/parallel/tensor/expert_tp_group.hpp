#pragma once
// The ranks that split the routed experts' FFN between them (expert tensor
// parallelism, parallel.etp; docs/architecture.md, "Tensor parallelism"):
// the Tp group cut into tp/etp blocks of etp consecutive ranks. Each block
// holds every expert split etp ways (StagePlan::etp_rank = tp_rank % etp)
// and runs the micro-batch's tokens through them, as the other blocks do,
// so the experts' partial sums reduce over the block only.
#include <memory>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"

namespace exa::parallel::tensor {

// This rank's block as a new communicator of the backend (its ranks those
// of the Tp group when etp = tp, where callers may use that group's own);
// null when etp = 1 (nothing to reduce). Collective over the Tp group.
std::shared_ptr<comm::Communicator> make_expert_tp_comm(const comm::ProcessGrid& grid, int etp,
                                                        comm::Backend backend);

}  // namespace exa::parallel::tensor
