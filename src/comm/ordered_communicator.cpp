#include "comm/ordered_communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"

namespace exa::comm {

namespace {

std::vector<OrderedCommunicator*>& live() {
  static std::vector<OrderedCommunicator*> all;
  return all;
}

class OrderedRequest final : public RequestImpl {
 public:
  explicit OrderedRequest(std::shared_ptr<OrderedCommunicator::Op> op) : op_(std::move(op)) {}
  // Callers wait by polling test() as well as by wait(), so the stall
  // clock starts at the first poll and runs across both.
  bool test() override {
    if (op_->done) return true;
    OrderedCommunicator::progress_all();
    if (op_->done) return true;
    const double now = wall_seconds();
    if (polled_since_ < 0) polled_since_ = now;
    const double s = op_->owner->stall_seconds();
    if (now - polled_since_ > s) {
      op_->owner->abandon();
      throw Error(fmt::format(
          "exa::comm::OrderedCommunicator: an operation made no progress for {} s: its partner is queued behind "
          "an operation that waits for this rank, so this posting order would deadlock on NCCL",
          s));
    }
    return false;
  }
  void wait() override {
    while (!test()) std::this_thread::yield();
  }

 private:
  std::shared_ptr<OrderedCommunicator::Op> op_;
  double polled_since_ = -1;
};

}  // namespace

OrderedCommunicator::OrderedCommunicator(MPI_Comm comm, double stall_seconds) : stall_s_(stall_seconds) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  live().push_back(this);
}

OrderedCommunicator::~OrderedCommunicator() {
  // A stream finishes its work before it is destroyed.
  while (!queue_.empty()) {
    progress_all();
    std::this_thread::yield();
  }
  auto& all = live();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void OrderedCommunicator::abandon() {
  for (auto& op : queue_) {
    for (MPI_Request& r : op->reqs) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    op->done = true;
  }
  queue_.clear();
}

void OrderedCommunicator::progress_all() {
  for (OrderedCommunicator* c : live()) c->progress();
}

void OrderedCommunicator::progress() {
  while (!queue_.empty()) {
    Op& op = *queue_.front();
    if (!op.started) {
      op.start(op.reqs);
      op.started = true;
    }
    int flag = 0;
    mpi_check(MPI_Testall(int(op.reqs.size()), op.reqs.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (!flag) return;
    op.done = true;
    queue_.pop_front();
  }
}

Request OrderedCommunicator::enqueue(std::function<void(std::vector<MPI_Request>&)> start) {
  auto op = std::make_shared<Op>();
  op->owner = this;
  op->start = std::move(start);
  queue_.push_back(op);
  progress();
  return Request(std::make_unique<OrderedRequest>(std::move(op)));
}

// Each start posts one MPI request into `r`.
#define EXA_ORDERED_POST(call, what)  \
  do {                                \
    r.emplace_back(MPI_REQUEST_NULL); \
    mpi_check((call), what);          \
  } while (0)

Request OrderedCommunicator::iallreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  const int n = mpi_count(count, "allreduce");
  const void* s = send == recv ? MPI_IN_PLACE : send;
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Iallreduce(s, recv, n, mpi_datatype(t), mpi_op(op), comm_, &r.back()), "MPI_Iallreduce");
  });
}

Request OrderedCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op) {
  const int n = mpi_count(block, "reduce_scatter");
  EXA_REQUIRE(send != recv, "exa::comm::reduce_scatter: send and recv must be different buffers");
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Ireduce_scatter_block(send, recv, n, mpi_datatype(t), mpi_op(op), comm_, &r.back()),
                     "MPI_Ireduce_scatter_block");
  });
}

Request OrderedCommunicator::iallgather(const void* send, void* recv, std::size_t block, DType t) {
  const int n = mpi_count(block, "allgather");
  const auto* mine = static_cast<const char*>(recv) + block * dtype_size(t) * static_cast<std::size_t>(rank_);
  const void* s = send == static_cast<const void*>(mine) ? MPI_IN_PLACE : send;
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Iallgather(s, n, mpi_datatype(t), recv, n, mpi_datatype(t), comm_, &r.back()),
                     "MPI_Iallgather");
  });
}

Request OrderedCommunicator::ialltoallv(const void* send, const std::vector<int>& send_counts,
                                        const std::vector<int>& send_displs, void* recv,
                                        const std::vector<int>& recv_counts, const std::vector<int>& recv_displs,
                                        DType t) {
  const auto n = static_cast<std::size_t>(size_);
  require_alltoallv_layout(n, send_counts, send_displs, recv_counts, recv_displs);
  auto a = std::make_shared<std::vector<int>>();
  for (const auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs}) a->insert(a->end(), v->begin(), v->end());
  return enqueue([=](std::vector<MPI_Request>& r) {
    int* p = a->data();
    EXA_ORDERED_POST(MPI_Ialltoallv(send, p, p + n, mpi_datatype(t), recv, p + 2 * n, p + 3 * n, mpi_datatype(t),
                                    comm_, &r.back()),
                     "MPI_Ialltoallv");
  });
}

Request OrderedCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  const int n = mpi_count(count, "broadcast");
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Ibcast(buf, n, mpi_datatype(t), root, comm_, &r.back()), "MPI_Ibcast");
  });
}

Request OrderedCommunicator::isend(const void* buf, std::size_t count, DType t, int dest, int /*tag*/) {
  const int n = mpi_count(count, "send");
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Issend(buf, n, mpi_datatype(t), dest, 0, comm_, &r.back()), "MPI_Issend");
  });
}

Request OrderedCommunicator::irecv(void* buf, std::size_t count, DType t, int src, int /*tag*/) {
  const int n = mpi_count(count, "recv");
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Irecv(buf, n, mpi_datatype(t), src, 0, comm_, &r.back()), "MPI_Irecv");
  });
}

Request OrderedCommunicator::ibarrier() {
  return enqueue([=](std::vector<MPI_Request>& r) { EXA_ORDERED_POST(MPI_Ibarrier(comm_, &r.back()), "MPI_Ibarrier"); });
}

Request OrderedCommunicator::isendrecv(const void* send, std::size_t send_count, int dest, void* recv,
                                       std::size_t recv_count, int src, DType t, int /*tag*/) {
  const int ns = mpi_count(send_count, "send"), nr = mpi_count(recv_count, "recv");
  return enqueue([=](std::vector<MPI_Request>& r) {
    EXA_ORDERED_POST(MPI_Irecv(recv, nr, mpi_datatype(t), src, 0, comm_, &r.back()), "MPI_Irecv");
    EXA_ORDERED_POST(MPI_Issend(send, ns, mpi_datatype(t), dest, 0, comm_, &r.back()), "MPI_Issend");
  });
}

#undef EXA_ORDERED_POST

std::unique_ptr<Communicator> make_ordered_communicator(MPI_Comm comm) {
  return std::make_unique<OrderedCommunicator>(comm);
}

}  // namespace exa::comm
