#pragma once
// exa::comm::OrderedCommunicator: the Communicator interface over MPI with
// the ordering rules of NCCL on one CUDA stream, so that code which must be
// deadlock-free and correctly matched on NCCL is tested on CPU builds
// (docs/architecture.md, "GPU communication paths"). Three rules:
//
//   - operations run one at a time in posting order: an operation starts
//     only when every one posted before it on this communicator is complete
//     (a stream's kernels);
//   - point-to-point ignores tags: receives match sends in posting order
//     (NCCL has no tags);
//   - a send completes only once its receive has started (MPI_Issend), the
//     worst case of NCCL's protocols; isendrecv's two halves run together
//     (an NCCL group).
//
// Every live OrderedCommunicator advances whenever any of their requests is
// tested or waited on, as a GPU runs every stream whichever one the host
// waits for. A request that stays incomplete for `stall_seconds` from the
// first time it is polled or waited on throws exa::Error (the posting
// order would deadlock on NCCL) and cancels the communicator's outstanding
// operations. Buffers are host memory (device_memory() is false).
// EXAMOE_ORDERED_COMM=1 makes it every parallel strategy's bulk
// communicator (make_transport).
#include <mpi.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace exa::comm {

class OrderedCommunicator final : public Communicator {
 public:
  // Collective over `comm`: works on a duplicate of it.
  explicit OrderedCommunicator(MPI_Comm comm, double stall_seconds = 120);
  ~OrderedCommunicator() override;
  OrderedCommunicator(const OrderedCommunicator&) = delete;
  OrderedCommunicator& operator=(const OrderedCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "ordered"; }
  bool device_memory() const override { return false; }
  bool ordered() const override { return true; }

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
  Request isend(const void* buf, std::size_t count, DType t, int dest, int tag) override;
  Request irecv(void* buf, std::size_t count, DType t, int src, int tag) override;
  Request ibarrier() override;
  Request isendrecv(const void* send, std::size_t send_count, int dest, void* recv, std::size_t recv_count, int src,
                    DType t, int tag) override;

  // One operation of the queue: `start` posts its MPI requests; it is done
  // when they all are.
  struct Op {
    OrderedCommunicator* owner = nullptr;
    std::function<void(std::vector<MPI_Request>&)> start;
    std::vector<MPI_Request> reqs;
    bool started = false, done = false;
  };
  double stall_seconds() const { return stall_s_; }
  // After a stall: cancels what was started and drops the queue (every
  // request of this communicator then counts as complete).
  void abandon();

  // Advances every live OrderedCommunicator's queue as far as it goes now.
  static void progress_all();

 private:
  Request enqueue(std::function<void(std::vector<MPI_Request>&)> start);
  void progress();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double stall_s_;
  std::deque<std::shared_ptr<Op>> queue_;
};

std::unique_ptr<Communicator> make_ordered_communicator(MPI_Comm comm);

}  // namespace exa::comm
