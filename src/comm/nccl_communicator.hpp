#pragma once
// exa::comm::NcclCommunicator: the Communicator interface on NCCL, for CUDA
// builds with NCCL (EXAMOE_HAVE_NCCL). Operations are enqueued on the
// communicator's CUDA stream; a Request is a cudaEvent recorded after the
// operation (test = cudaEventQuery, wait = cudaEventSynchronize). Buffers are
// device memory; the View forms stage host Views through device mirrors.
// nccl.h stays out of this header (users need no NCCL include path).
#include <mpi.h>

#include "comm/communicator.hpp"

#if EXAMOE_HAVE_NCCL

struct ncclComm;
struct CUstream_st;

namespace exa::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm`: rank 0's ncclUniqueId is broadcast over MPI.
  // `stream`: the CUDA stream to enqueue on; nullptr = a stream of its own.
  explicit NcclCommunicator(MPI_Comm comm, CUstream_st* stream = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  bool device_memory() const override { return true; }
  bool ordered() const override { return true; }  // one stream, no tags
  CUstream_st* stream() const { return stream_; }

  using Communicator::iallgather;
  using Communicator::iallreduce;
  using Communicator::ialltoallv;
  using Communicator::ibroadcast;
  using Communicator::irecv;
  using Communicator::ireduce_scatter;
  using Communicator::isend;
  using Communicator::isendrecv;

  Request iallreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op) override;
  Request iallgather(const void* send, void* recv, std::size_t block, DType t) override;
  Request ialltoallv(const void* send, const std::vector<int>& send_counts, const std::vector<int>& send_displs,
                     void* recv, const std::vector<int>& recv_counts, const std::vector<int>& recv_displs,
                     DType t) override;
  Request ibroadcast(void* buf, std::size_t count, DType t, int root) override;
  // NCCL point-to-point has no tags: `tag` is ignored (order matches order).
  Request isend(const void* buf, std::size_t count, DType t, int dest, int tag) override;
  Request irecv(void* buf, std::size_t count, DType t, int src, int tag) override;
  Request ibarrier() override;
  // ncclSend and ncclRecv in one group.
  Request isendrecv(const void* send, std::size_t send_count, int dest, void* recv, std::size_t recv_count, int src,
                    DType t, int tag) override;

 private:
  Request record();  // event after the work enqueued so far
  ncclComm* comm_ = nullptr;
  CUstream_st* stream_ = nullptr;
  bool own_stream_ = false;
  int* scratch_ = nullptr;  // one device int for ibarrier
  int rank_ = 0, size_ = 1;
};

}  // namespace exa::comm

#endif  // EXAMOE_HAVE_NCCL
