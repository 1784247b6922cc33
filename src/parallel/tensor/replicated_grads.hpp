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
  // them once as well.
  ReplicatedGradients(std::shared_ptr<comm::Communicator> tp, const model::ParameterStore& store,
                      const model::StagePlan& plan);

  // Sums their gradients in store.grads() over the TP group.
  void reduce(const model::ParameterStore& store);
  // Squared norm of their gradients on this rank (for the gradient norm,
  // which counts them once, not tp times).
  double sq_norm(const model::ParameterStore& store) const;
  comm::Communicator& comm() { return *tp_; }
  bool skipping_norms() const { return skip_norms_; }

 private:
  std::shared_ptr<comm::Communicator> tp_;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges_;  // (store offset, count), reduced
  std::vector<std::pair<std::int64_t, std::int64_t>> all_;     // every range whole on each TP rank (the norm)
  std::int64_t total_ = 0;
  bool skip_norms_ = false;
  View1<float> pack_;
};

}  // namespace exa::parallel::tensor
