// Compiled only in CUDA builds with NCCL (EXAMOE_HAVE_NCCL); empty otherwise.
#include "comm/nccl_communicator.hpp"

#if EXAMOE_HAVE_NCCL

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "core/error.hpp"

namespace exa::comm {

namespace {

void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)));
}

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw Error(fmt::format("{} failed: {}", what, ncclGetErrorString(rc)));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

class EventRequest final : public RequestImpl {
 public:
  explicit EventRequest(cudaStream_t s) {
    cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ev_, s), "cudaEventRecord");
  }
  ~EventRequest() override {
    if (ev_) cudaEventDestroy(ev_);
  }
  bool test() override {
    const cudaError_t rc = cudaEventQuery(ev_);
    if (rc == cudaErrorNotReady) return false;
    cuda_check(rc, "cudaEventQuery");
    return true;
  }
  void wait() override { cuda_check(cudaEventSynchronize(ev_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t ev_ = nullptr;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, CUstream_st* stream) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  ncclUniqueId id;
  if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  if (stream) {
    stream_ = stream;
  } else {
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = s;
    own_stream_ = true;
  }
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(int)), "cudaMalloc");
  ncclComm_t c = nullptr;
  nccl_check(ncclCommInitRank(&c, size_, id, rank_), "ncclCommInitRank");
  comm_ = c;
}

NcclCommunicator::~NcclCommunicator() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_) ncclCommDestroy(comm_);
  if (scratch_) cudaFree(scratch_);
  if (own_stream_ && stream_) cudaStreamDestroy(stream_);
}

Request NcclCommunicator::record() { return Request(std::make_unique<EventRequest>(stream_)); }

Request NcclCommunicator::iallreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  nccl_check(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_, stream_), "ncclAllReduce");
  return record();
}

Request NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op) {
  nccl_check(ncclReduceScatter(send, recv, block, nccl_type(t), nccl_op(op), comm_, stream_), "ncclReduceScatter");
  return record();
}

Request NcclCommunicator::iallgather(const void* send, void* recv, std::size_t block, DType t) {
  nccl_check(ncclAllGather(send, recv, block, nccl_type(t), comm_, stream_), "ncclAllGather");
  return record();
}

Request NcclCommunicator::ialltoallv(const void* send, const std::vector<int>& send_counts,
                                     const std::vector<int>& send_displs, void* recv,
                                     const std::vector<int>& recv_counts, const std::vector<int>& recv_displs,
                                     DType t) {
  const auto n = static_cast<std::size_t>(size_);
  require_alltoallv_layout(n, send_counts, send_displs, recv_counts, recv_displs);
  const std::size_t es = dtype_size(t);
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < size_; ++p) {
    if (send_counts[p] > 0) {
      nccl_check(ncclSend(s + std::size_t(send_displs[p]) * es, std::size_t(send_counts[p]), nccl_type(t), p, comm_,
                          stream_),
                 "ncclSend");
    }
    if (recv_counts[p] > 0) {
      nccl_check(ncclRecv(r + std::size_t(recv_displs[p]) * es, std::size_t(recv_counts[p]), nccl_type(t), p, comm_,
                          stream_),
                 "ncclRecv");
    }
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  return record();
}

Request NcclCommunicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  nccl_check(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, stream_), "ncclBroadcast");
  return record();
}

Request NcclCommunicator::isend(const void* buf, std::size_t count, DType t, int dest, int /*tag*/) {
  nccl_check(ncclSend(buf, count, nccl_type(t), dest, comm_, stream_), "ncclSend");
  return record();
}

Request NcclCommunicator::irecv(void* buf, std::size_t count, DType t, int src, int /*tag*/) {
  nccl_check(ncclRecv(buf, count, nccl_type(t), src, comm_, stream_), "ncclRecv");
  return record();
}

Request NcclCommunicator::isendrecv(const void* send, std::size_t send_count, int dest, void* recv,
                                    std::size_t recv_count, int src, DType t, int /*tag*/) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  nccl_check(ncclRecv(recv, recv_count, nccl_type(t), src, comm_, stream_), "ncclRecv");
  nccl_check(ncclSend(send, send_count, nccl_type(t), dest, comm_, stream_), "ncclSend");
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  return record();
}

Request NcclCommunicator::ibarrier() {
  nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce(barrier)");
  return record();
}

bool nccl_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm) {
  EXA_REQUIRE(nccl_available(), "exa::comm: the NCCL backend needs a visible GPU and this rank sees none");
  return std::make_unique<NcclCommunicator>(comm);
}

}  // namespace exa::comm

#endif  // EXAMOE_HAVE_NCCL
