#include "comm/communicator.hpp"

#include <cstdlib>
#include <string>

#include "comm/ordered_communicator.hpp"
#include "core/error.hpp"

namespace exa::comm {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
  }
  return "?";
}

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    if (!done()) {
      try {
        wait();
      } catch (...) {
      }
    }
    impl_ = std::move(o.impl_);
    finish_ = std::move(o.finish_);
    keep_ = std::move(o.keep_);
  }
  return *this;
}

Request::~Request() {
  if (!done()) {
    try {
      wait();
    } catch (...) {
    }
  }
}

void Request::complete() {
  impl_.reset();
  auto f = std::move(finish_);
  finish_ = nullptr;
  if (f) f();
  keep_.clear();
}

void Request::wait() {
  if (impl_) impl_->wait();
  complete();
}

bool Request::test() {
  if (impl_ && !impl_->test()) return false;
  complete();
  return true;
}

Request& Request::then(std::function<void()> f) {
  if (!f) return *this;
  if (finish_) {
    finish_ = [a = std::move(finish_), b = std::move(f)]() {
      a();
      b();
    };
  } else {
    finish_ = std::move(f);
  }
  return *this;
}

Request& Request::keep(std::shared_ptr<void> p) {
  if (p) keep_.push_back(std::move(p));
  return *this;
}

void wait_all(std::vector<Request>& reqs) {
  for (auto& r : reqs) r.wait();
}

void require_alltoallv_layout(std::size_t n, const std::vector<int>& send_counts, const std::vector<int>& send_displs,
                              const std::vector<int>& recv_counts, const std::vector<int>& recv_displs) {
  EXA_REQUIRE(send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n &&
                  recv_displs.size() == n,
              "exa::comm::alltoallv: counts and displacements need one entry per rank ({}), got {}, {}, {}, {}", n,
              send_counts.size(), send_displs.size(), recv_counts.size(), recv_displs.size());
}

namespace {

class ChainImpl final : public RequestImpl {
 public:
  explicit ChainImpl(std::vector<std::function<Request()>> stages) : stages_(std::move(stages)) { advance(false); }
  bool test() override { return advance(false); }
  void wait() override { advance(true); }

 private:
  // Posts stages until one is still in flight (or, with `block`, all are done).
  bool advance(bool block) {
    for (;;) {
      if (block) {
        current_.wait();
      } else if (!current_.test()) {
        return false;
      }
      if (next_ == stages_.size()) return true;
      current_ = stages_[next_++]();
    }
  }
  std::vector<std::function<Request()>> stages_;
  std::size_t next_ = 0;
  Request current_;
};

}  // namespace

Request chain(std::vector<std::function<Request()>> stages) {
  return Request(std::make_unique<ChainImpl>(std::move(stages)));
}

namespace {

// Two requests that complete as one.
class PairImpl final : public RequestImpl {
 public:
  PairImpl(Request a, Request b) : a_(std::move(a)), b_(std::move(b)) {}
  bool test() override {
    const bool a = a_.test();
    return b_.test() && a;
  }
  void wait() override {
    a_.wait();
    b_.wait();
  }

 private:
  Request a_, b_;
};

}  // namespace

Request Communicator::isendrecv(const void* send, std::size_t send_count, int dest, void* recv,
                                std::size_t recv_count, int src, DType t, int tag) {
  // The receive first, so that a transport matching in posting order sees
  // it before this rank's send blocks anything.
  Request r = irecv(recv, recv_count, t, src, tag);
  Request s = isend(send, send_count, t, dest, tag);
  return Request(std::make_unique<PairImpl>(std::move(s), std::move(r)));
}

Backend backend_named(const std::string& name) {
  if (name == "mpi") return Backend::Mpi;
  if (name == "nccl") return Backend::Nccl;
  throw Error("comm.backend = \"" + name + "\" is not one of mpi, nccl");
}

const char* transport_name(Backend backend) {
  if (backend == Backend::Nccl) return "nccl";
  const char* ordered = std::getenv("EXAMOE_ORDERED_COMM");
  return ordered && std::string(ordered) == "1" ? "ordered" : "mpi";
}

std::unique_ptr<Communicator> make_transport(MPI_Comm comm, Backend backend) {
  const std::string t = transport_name(backend);
  if (t == "nccl") return make_nccl_communicator(comm);
  if (t == "ordered") return make_ordered_communicator(comm);
  return make_mpi_communicator(comm);
}

#if !EXAMOE_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm) {
  throw Error("exa::comm: this build has no NCCL (it needs a CUDA build with NCCL found at configure time); "
              "use the MPI backend");
}
bool nccl_available() { return false; }
#endif

}  // namespace exa::comm
