#pragma once
// ReplicatedGradients: the tensor-parallel reduction of the gradients of
// the tensors every TP rank holds whole (ParamSpec::tp_dim < 0: the norms'
// gains and the routers). Their weight gradients are split over the rows
// (model::RowShare: each TP rank sums its 1/tp of the tokens), so after the
// data-parallel reduction each rank holds a part and one allreduce over the
// TP group of all of them, packed, makes every rank's copy the whole
// gradient (docs/architecture.md, "Tensor parallelism"). A missing piece of
// this reduction is the classic cause of layouts drifting apart; the debug
// switch EXAMOE_DEBUG_TP_SKIP_NORM_REDUCTION=1 leaves the norms' gains out
// so that a test can show the equivalence check catching it.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_plan.hpp"

namespace exa::parallel::tensor {

class ReplicatedGradients {
 public:
  // The replicated tensors' pieces in `store` (the same ranges on every TP
  // rank: their boxes are whole and the ZeRO layouts equal). `plan` tells
  // which other tensors are whole on every TP rank too (routed experts at
  // etp = 1): their gradients are already whole, but the norm must count
  // them once as well. With 1 < etp < tp the routed experts are split over
  // blocks of etp ranks (expert_tp_group.hpp), `etp` this rank's block:
  // their adapters' whole factors are partial sums over the block, reduced
  // over it, and the split tensors repeat in each of the tp/etp blocks.
  ReplicatedGradients(std::shared_ptr<comm::Communicator> tp, std::shared_ptr<comm::Communicator> etp,
                      const model::ParameterStore& store, const model::StagePlan& plan);

  // Sums their gradients in store.grads() over the TP group (the experts'
  // whole factors under 1 < etp < tp over the block).
  void reduce(const model::ParameterStore& store);
  // Squared norms of this rank's gradients that a sum over the TP group
  // would count more than once (for the gradient norm): the tensors whole
  // on every TP rank, the Data group's and the routed experts' apart (the
  // latter differ over expert parallelism), and (1 - etp/tp) of the routed
  // experts' split tensors under 1 < etp < tp, which tp/etp blocks repeat.
  struct Norms {
    double data_whole = 0, expert_whole = 0, expert_repeats = 0;
  };
  Norms sq_norms(const model::ParameterStore& store) const;
  comm::Communicator& comm() { return *tp_; }
  bool skipping_norms() const { return skip_norms_; }

 private:
  using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;  // (store offset, count)
  std::shared_ptr<comm::Communicator> tp_, etp_;
  Ranges ranges_, block_ranges_;         // reduced over Tp / over the experts' block
  Ranges data_whole_, expert_whole_;     // whole on each TP rank (the norm)
  Ranges expert_split_;                  // split over a block, repeated by the others (the norm)
  double repeats_ = 0;                   // 1 - etp/tp
  bool skip_norms_ = false;
  View1<float> pack_, block_pack_;
};

}  // namespace exa::parallel::tensor
