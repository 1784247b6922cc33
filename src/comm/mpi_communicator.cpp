#include "comm/mpi_communicator.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstring>

#include "comm/watchdog.hpp"
#include "core/error.hpp"

namespace exa::comm {

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

namespace {

class MpiRequest final : public RequestImpl {
 public:
  // `what` (a string literal) and `comm_size` name the wait if it times out.
  MpiRequest(const char* what, int comm_size) : what_(what), comm_size_(comm_size) {}
  MPI_Request* handle() { return &req_; }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }
  void wait() override {
    // Bounded by resilience.timeout_s when the watchdog runs, else MPI_Wait.
    if (req_ != MPI_REQUEST_NULL) check(bounded_wait(&req_, what_, comm_size_), "MPI_Wait");
  }
  static void check(int rc, const char* what) { mpi_check(rc, what); }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
  const char* what_;
  int comm_size_;
};

// Runs an MPI_I* call that fills `req` and wraps it.
template <class F>
Request post(F&& f, const char* what, int comm_size) {
  auto impl = std::make_unique<MpiRequest>(what, comm_size);
  MpiRequest::check(f(impl->handle()), what);
  return Request(std::move(impl));
}

}  // namespace

int mpi_count(std::size_t n, const char* what) {
  EXA_REQUIRE(n <= static_cast<std::size_t>(INT_MAX),
              "exa::comm::{}: {} elements exceed MPI's int count limit {}; split the buffer", what, n, INT_MAX);
  return static_cast<int>(n);
}

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(fmt::format("{} failed: {}", what, std::string(msg, static_cast<std::size_t>(len))));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Request MpiCommunicator::iallreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  const int n = mpi_count(count, "allreduce");
  const void* s = send == recv ? MPI_IN_PLACE : send;
  return post([&](MPI_Request* r) { return MPI_Iallreduce(s, recv, n, mpi_datatype(t), mpi_op(op), comm_, r); },
              "MPI_Iallreduce", size_);
}

Request MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op) {
  const int n = mpi_count(block, "reduce_scatter");
  mpi_count(block * static_cast<std::size_t>(size_), "reduce_scatter");
  EXA_REQUIRE(send != recv || size_ == 1, "exa::comm::reduce_scatter: send and recv must be different buffers");
  if (size_ == 1) {
    if (send != recv) std::memcpy(recv, send, block * dtype_size(t));
    return Request();
  }
  return post(
      [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(send, recv, n, mpi_datatype(t), mpi_op(op), comm_, r); },
      "MPI_Ireduce_scatter_block", size_);
}

Request MpiCommunicator::iallgather(const void* send, void* recv, std::size_t block, DType t) {
  const int n = mpi_count(block, "allgather");
  mpi_count(block * static_cast<std::size_t>(size_), "allgather");
  const auto* mine = static_cast<const char*>(recv) + block * dtype_size(t) * static_cast<std::size_t>(rank_);
  const void* s = send == static_cast<const void*>(mine) ? MPI_IN_PLACE : send;
  return post([&](MPI_Request* r) { return MPI_Iallgather(s, n, mpi_datatype(t), recv, n, mpi_datatype(t), comm_, r); },
              "MPI_Iallgather", size_);
}

Request MpiCommunicator::ialltoallv(const void* send, const std::vector<int>& send_counts,
                                    const std::vector<int>& send_displs, void* recv,
                                    const std::vector<int>& recv_counts, const std::vector<int>& recv_displs,
                                    DType t) {
  const auto n = static_cast<std::size_t>(size_);
  require_alltoallv_layout(n, send_counts, send_displs, recv_counts, recv_displs);
  // The arrays must outlive the operation: the request keeps copies.
  auto arrays = std::make_shared<std::vector<int>>();
  arrays->reserve(4 * n);
  for (const auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs}) {
    arrays->insert(arrays->end(), v->begin(), v->end());
  }
  int* a = arrays->data();
  Request r = post(
      [&](MPI_Request* req) {
        return MPI_Ialltoallv(send, a, a + n, mpi_datatype(t), recv, a + 2 * n, a + 3 * n, mpi_datatype(t), comm_,
                              req);
      },
      "MPI_Ialltoallv", size_);
  r.keep(arrays);
  return r;
}

Request MpiCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  const int n = mpi_count(count, "broadcast");
  return post([&](MPI_Request* r) { return MPI_Ibcast(buf, n, mpi_datatype(t), root, comm_, r); }, "MPI_Ibcast", size_);
}

Request MpiCommunicator::isend(const void* buf, std::size_t count, DType t, int dest, int tag) {
  const int n = mpi_count(count, "send");
  return post([&](MPI_Request* r) { return MPI_Isend(buf, n, mpi_datatype(t), dest, tag, comm_, r); },
              "MPI_Isend", size_);
}

Request MpiCommunicator::irecv(void* buf, std::size_t count, DType t, int src, int tag) {
  const int n = mpi_count(count, "recv");
  return post([&](MPI_Request* r) { return MPI_Irecv(buf, n, mpi_datatype(t), src, tag, comm_, r); },
              "MPI_Irecv", size_);
}

Request MpiCommunicator::ibarrier() {
  return post([&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }, "MPI_Ibarrier", size_);
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace exa::comm
