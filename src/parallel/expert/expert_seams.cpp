#include "parallel/expert/expert_seams.hpp"

#include "comm/hierarchical.hpp"
#include "parallel/expert/all_to_all_dispatcher.hpp"

namespace exa::parallel::expert {

void use_expert_parallel(model::Seams<float>& seams, const ParallelLayout& layout,
                         std::shared_ptr<const ExpertPlacement> placement) {
  const auto& cfg = layout.model();
  if (layout.plan().all_experts(cfg)) return;
  const auto& opt = layout.options().expert;
  const MPI_Comm ep = layout.grid().comm(comm::Group::Ep);
  std::shared_ptr<comm::Communicator> counts = comm::make_mpi_communicator(ep);
  std::shared_ptr<comm::Communicator> rows = comm::make_transport(ep, opt.backend);
  std::shared_ptr<comm::HierarchicalComms> hier;
  if (opt.hierarchical)
    hier = std::make_shared<comm::HierarchicalComms>(comm::make_hierarchical(layout.grid(), comm::Group::Ep,
                                                                             opt.backend));
  auto dispatcher = std::make_shared<AllToAllDispatcher<float>>(std::move(counts), std::move(rows),
                                                                int(cfg.n_experts), std::move(hier),
                                                                std::move(placement));
  dispatcher->set_wire_codec(opt.compression);
  dispatcher->set_chunks(opt.chunks);
  seams.dispatcher = std::move(dispatcher);
}

}  // namespace exa::parallel::expert
