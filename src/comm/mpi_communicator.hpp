#pragma once
// exa::comm::MpiCommunicator: the Communicator interface on MPI-3 nonblocking
// collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather,
// MPI_Ialltoallv, MPI_Ibcast, MPI_Isend/Irecv, MPI_Ibarrier). Buffers are host
// memory; the View forms stage device Views through host mirrors.
//
// MPICH progresses nonblocking collectives inside MPI calls: a rank that
// overlaps communication with compute should call Request::test() now and
// then (or set MPIR_CVAR_ASYNC_PROGRESS=1).
#include <mpi.h>

#include "comm/communicator.hpp"

namespace exa::comm {

MPI_Datatype mpi_datatype(DType t);
MPI_Op mpi_op(ReduceOp op);
// `n` as MPI's int count; exa::Error naming `what` when it does not fit.
int mpi_count(std::size_t n, const char* what);
// exa::Error with MPI's message for `what` unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* what);

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm`: works on a duplicate of it, freed by the destructor.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  bool device_memory() const override { return false; }
  MPI_Comm comm() const { return comm_; }

  using Communicator::iallgather;
  using Communicator::iallreduce;
  using Communicator::ialltoallv;
  using Communicator::ibroadcast;
  using Communicator::irecv;
  using Communicator::ireduce_scatter;
  using Communicator::isend;

  Request iallreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op) override;
  Request iallgather(const void* send, void* recv, std::size_t block, DType t) override;
  Request ialltoallv(const void* send, const std::vector<int>& send_counts, const std::vector<int>& send_displs,
                     void* recv, const std::vector<int>& recv_counts, const std::vector<int>& recv_displs,
                     DType t) override;
  Request ibroadcast(void* buf, std::size_t count, DType t, int root) override;
  Request isend(const void* buf, std::size_t count, DType t, int dest, int tag) override;
  Request irecv(void* buf, std::size_t count, DType t, int src, int tag) override;
  Request ibarrier() override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace exa::comm
