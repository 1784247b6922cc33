#include "parallel/tensor/tensor_seams.hpp"

#include <memory>

#include "parallel/tensor/expert_tensor_dispatcher.hpp"
#include "parallel/tensor/expert_tp_group.hpp"
#include "parallel/tensor/parallel_linear.hpp"
#include "parallel/tensor/vocab_parallel.hpp"

namespace exa::parallel::tensor {

void use_tensor_parallel(model::Seams<float>& seams, const ParallelLayout& layout) {
  const auto& plan = layout.plan();
  if (plan.tp == 1) return;
  const comm::Backend backend = layout.options().data.backend;
  const bool overlap = layout.options().tensor.overlap;
  const MPI_Comm g = layout.grid().comm(comm::Group::Tp);
  std::shared_ptr<comm::Communicator> c = comm::make_transport(g, backend);
  const auto tp = std::make_shared<const TpComm>(std::move(c));
  const auto column = std::make_shared<const ColumnParallelLinear<float>>(tp, overlap);
  seams.column = column;
  seams.row = std::make_shared<const RowParallelLinear<float>>(tp);
  seams.replicated = std::make_shared<const ReplicatedLinear<float>>(tp, model::RowShare{plan.tp_rank, plan.tp});
  seams.embedding = std::make_shared<const VocabParallelEmbedding<float>>(tp, plan.vocab_begin);
  seams.loss_head = std::make_shared<const VocabParallelLossHead<float>>(tp, column, plan.vocab_begin);
  if (plan.etp > 1 || plan.sequence_parallel) {
    std::shared_ptr<const TpComm> etp;
    if (plan.etp == plan.tp) etp = tp;
    else if (plan.etp > 1)
      etp = std::make_shared<const TpComm>(make_expert_tp_comm(layout.grid(), int(plan.etp), backend));
    seams.dispatcher = std::make_shared<ExpertTensorParallelDispatcher<float>>(seams.dispatcher, tp, etp);
  }
}

}  // namespace exa::parallel::tensor
