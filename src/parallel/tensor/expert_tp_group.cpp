#include "parallel/tensor/expert_tp_group.hpp"

#include "core/error.hpp"

namespace exa::parallel::tensor {

std::shared_ptr<comm::Communicator> make_expert_tp_comm(const comm::ProcessGrid& grid, int etp,
                                                        comm::Backend backend) {
  const MPI_Comm tp = grid.comm(comm::Group::Tp);
  int rank = 0, size = 1;
  MPI_Comm_rank(tp, &rank);
  MPI_Comm_size(tp, &size);
  EXA_REQUIRE(etp >= 1 && size % etp == 0, "expert tensor parallelism: etp = {} does not divide tp = {}", etp, size);
  if (etp == 1) return nullptr;
  // Every Tp rank splits, etp = tp too, so that the calls match.
  MPI_Comm block = MPI_COMM_NULL;
  MPI_Comm_split(tp, rank / etp, rank, &block);
  std::shared_ptr<comm::Communicator> c = comm::make_transport(block, backend);
  MPI_Comm_free(&block);
  return c;
}

}  // namespace exa::parallel::tensor
