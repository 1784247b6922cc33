#pragma once
// Moving routed experts between ranks when their placement changes
// (ExpertPlacement; docs/architecture.md, "Expert parallelism"). Every
// per-element buffer laid out like the ParameterStore's values (the master
// weights, AdamW's two moments) travels: for each expert tensor of the
// layer (ParamSpec::ep_dim == 0, [E, ...] globally, this rank's box its
// slots) the rows of each expert that changes slot go from the ranks that
// hold them to the ranks of the new slot, in one all-to-all-v over the data
// group per buffer.
//
// Under ZeRO 1-3 a slot's elements are spread over the expert-data group
// (each rank owns a run of its box) and land spread differently on the new
// rank: every piece is sent by the rank that owns it to the rank that will.
// Under ZeRO 0 the replicas of an EP rank each hold everything, and each
// sends to its own counterpart (same expert-data index). Gradients do not
// move: this runs between steps, when they are about to be zeroed; the
// caller refreshes the working copies afterwards (DataParallel::params_updated).
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "model/parameter_store.hpp"

namespace exa::parallel::expert {

struct ExpertMove {
  std::int64_t layer = 0;
  std::vector<int> from, to;  // expert_at before and after ([E], ExpertPlacement)
};

// Where this rank sits: its EP index (slots [ep_rank*El, (ep_rank+1)*El))
// and its expert-data index, in `data` (the data group, dp*cp ranks).
struct MoverRank {
  MPI_Comm data = MPI_COMM_NULL;
  int ep_rank = 0, expert_data = 0;
};

// Collective over `where.data`. `buffers` are laid out like store.values();
// `trainable_only[b]` (all false when empty) marks a buffer that holds the
// trainable tensors only (AdamW's moments: under LoRA the frozen experts
// have none), whose layer's trainable expert tensors move. The flags must
// be the same on every rank. Returns the elements this rank sent per
// buffer.
std::int64_t move_experts(const model::ParameterStore& store, const std::vector<View1<float>>& buffers,
                          const MoverRank& where, const ExpertMove& move,
                          const std::vector<bool>& trainable_only = {});

// The same for per-rank state of whole boxes (top-k's residuals: each rank
// holds its own values for every element of its box, ZeRO or not):
// `boxes[i]` is tensor i's (store order; empty: none; every trainable
// expert tensor of the layer has one, or none does), and each expert's
// rows go from the old slot's rank to the new slot's rank of the same
// expert-data index. Collective over `where.data`.
std::int64_t move_expert_boxes(const model::ParameterStore& store, const std::vector<View1<float>>& boxes,
                               const MoverRank& where, const ExpertMove& move);

// Per global expert of `layer`, the sum over the data group of the bit
// patterns of its rows in `boxes` (as move_expert_boxes takes them), with
// expert_at[p] the expert in slot p: a move keeps each expert's sum.
std::vector<std::uint64_t> expert_box_checksums(const model::ParameterStore& store,
                                                const std::vector<View1<float>>& boxes, const MoverRank& where,
                                                std::int64_t layer, const std::vector<int>& expert_at);

}  // namespace exa::parallel::expert
