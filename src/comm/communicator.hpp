#pragma once
// exa::comm::Communicator: the collectives ExaMoE uses, behind one interface
// with an MPI backend (MpiCommunicator, host memory) and an NCCL backend
// (NcclCommunicator, device memory; CUDA builds with NCCL only).
//
//   auto dp = exa::comm::make_communicator(grid.comm(Group::Data));
//   dp->allreduce(grads);                          // blocking, in place, sum
//   auto h = dp->iallreduce(bucket);               // nonblocking
//   ... compute ...
//   h.wait();
//
// Raw-pointer forms take element counts and a DType; the pointers must live
// in the memory the backend reads (`device_memory()`: false = host-accessible
// memory for MPI, true = device memory for NCCL). The View1 forms stage a
// View through a mirror when its memory space is not the backend's, and copy
// results back when the operation completes (wait() / a test() that returns
// true). Every collective is called by all members of the group in the same
// order; a nonblocking one's buffers must stay untouched until completion.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/types.hpp"

namespace exa::comm {

enum class DType { F32, F64, I32, I64 };
// The transport of a parallel strategy's bulk traffic (comm.backend).
enum class Backend { Mpi, Nccl };
// comm.backend's value ("mpi", "nccl") as a Backend; exa::Error otherwise.
Backend backend_named(const std::string& name);
enum class ReduceOp { Sum, Max, Min };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);

template <class T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return DType::F32;
  } else if constexpr (std::is_same_v<U, double>) {
    return DType::F64;
  } else if constexpr (std::is_same_v<U, std::int32_t>) {
    return DType::I32;
  } else {
    static_assert(std::is_same_v<U, std::int64_t>, "collectives take float, double, int32 or int64");
    return DType::I64;
  }
}

// Backend half of a Request.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  virtual bool test() = 0;  // true once complete (may progress the operation)
  virtual void wait() = 0;
};

// Handle of a nonblocking operation. Move-only. A default-constructed Request
// is complete. Destroying an incomplete Request waits for it.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  void wait();
  bool test();
  bool done() const { return !impl_ && !finish_; }

  // Runs `f` once, after the operation completes (staging copies back).
  Request& then(std::function<void()> f);
  // Keeps `p` alive until the request completes (staging buffers, counts).
  Request& keep(std::shared_ptr<void> p);

 private:
  void complete();
  std::unique_ptr<RequestImpl> impl_;
  std::function<void()> finish_;
  std::vector<std::shared_ptr<void>> keep_;
};

void wait_all(std::vector<Request>& reqs);

// Backends' shared argument check: exa::Error unless the four arrays of an
// alltoallv over `ranks` ranks have one entry per rank.
void require_alltoallv_layout(std::size_t ranks, const std::vector<int>& send_counts,
                              const std::vector<int>& send_displs, const std::vector<int>& recv_counts,
                              const std::vector<int>& recv_displs);

// A Request made of stages run one after another: stage i+1 is posted when
// stage i completes (on test() or wait()). Only one chain may be in flight
// per communicator: stages are posted when found complete, which differs
// from rank to rank, and MPI/NCCL match collectives by posting order. (The
// hierarchical collectives queue their stages per communicator instead.)
Request chain(std::vector<std::function<Request()>> stages);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "nccl"
  // true: buffers must be device memory (NCCL); false: host-accessible (MPI).
  virtual bool device_memory() const = 0;
  // true: operations run one after another in posting order and
  // point-to-point ignores tags, as NCCL's on its one stream (and the
  // ordered test double). A caller must then post each receive in the
  // order its peer sends, and never block on an operation whose partner
  // the peer posts only after something queued behind it here.
  virtual bool ordered() const { return false; }

  // ---- raw pointers (count in elements) -------------------------------
  // allreduce: send == recv is in place.
  virtual Request iallreduce(const void* send, void* recv, std::size_t count, DType t,
                             ReduceOp op = ReduceOp::Sum) = 0;
  // reduce_scatter: send holds size()*block elements, recv gets this rank's
  // reduced block (elements [rank*block, (rank+1)*block) of the sum).
  virtual Request ireduce_scatter(const void* send, void* recv, std::size_t block, DType t,
                                   ReduceOp op = ReduceOp::Sum) = 0;
  // allgather: send holds block elements, recv size()*block (rank-ordered).
  // send == recv + rank*block is in place.
  virtual Request iallgather(const void* send, void* recv, std::size_t block, DType t) = 0;
  // all-to-all-v: counts and displacements in elements, one per rank.
  virtual Request ialltoallv(const void* send, const std::vector<int>& send_counts,
                             const std::vector<int>& send_displs, void* recv, const std::vector<int>& recv_counts,
                             const std::vector<int>& recv_displs, DType t) = 0;
  virtual Request ibroadcast(void* buf, std::size_t count, DType t, int root) = 0;
  virtual Request isend(const void* buf, std::size_t count, DType t, int dest, int tag = 0) = 0;
  virtual Request irecv(void* buf, std::size_t count, DType t, int src, int tag = 0) = 0;
  virtual Request ibarrier() = 0;
  // A send to `dest` and a receive from `src` that progress together (one
  // NCCL group): a ring shift that an ordered communicator cannot deadlock.
  // The default posts the two as isend and irecv.
  virtual Request isendrecv(const void* send, std::size_t send_count, int dest, void* recv, std::size_t recv_count,
                            int src, DType t, int tag = 0);

  void allreduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op = ReduceOp::Sum) {
    iallreduce(send, recv, count, t, op).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::size_t block, DType t, ReduceOp op = ReduceOp::Sum) {
    ireduce_scatter(send, recv, block, t, op).wait();
  }
  void allgather(const void* send, void* recv, std::size_t block, DType t) {
    iallgather(send, recv, block, t).wait();
  }
  void alltoallv(const void* send, const std::vector<int>& sc, const std::vector<int>& sd, void* recv,
                 const std::vector<int>& rc, const std::vector<int>& rd, DType t) {
    ialltoallv(send, sc, sd, recv, rc, rd, t).wait();
  }
  void broadcast(void* buf, std::size_t count, DType t, int root) { ibroadcast(buf, count, t, root).wait(); }
  void send(const void* buf, std::size_t count, DType t, int dest, int tag = 0) {
    isend(buf, count, t, dest, tag).wait();
  }
  void recv(void* buf, std::size_t count, DType t, int src, int tag = 0) { irecv(buf, count, t, src, tag).wait(); }
  void barrier() { ibarrier().wait(); }

  // ---- typed pointers -------------------------------------------------
  template <class T>
  Request iallreduce(const T* send, T* recv, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    return iallreduce(static_cast<const void*>(send), static_cast<void*>(recv), count, dtype_of<T>(), op);
  }
  template <class T>
  void allreduce(const T* send, T* recv, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    iallreduce(send, recv, count, op).wait();
  }

  // ---- Views (rank 1, contiguous) --------------------------------------
  // In-place allreduce of `v`.
  template <class T, class... P>
  Request iallreduce(const Kokkos::View<T*, P...>& v, ReduceOp op = ReduceOp::Sum);
  template <class T, class... P>
  void allreduce(const Kokkos::View<T*, P...>& v, ReduceOp op = ReduceOp::Sum) {
    iallreduce(v, op).wait();
  }
  // `send` has size()*recv.extent(0) elements.
  template <class T, class... P, class... Q>
  Request ireduce_scatter(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv,
                          ReduceOp op = ReduceOp::Sum);
  template <class T, class... P, class... Q>
  void reduce_scatter(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv,
                      ReduceOp op = ReduceOp::Sum) {
    ireduce_scatter(send, recv, op).wait();
  }
  // `recv` has size()*send.extent(0) elements.
  template <class T, class... P, class... Q>
  Request iallgather(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv);
  template <class T, class... P, class... Q>
  void allgather(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv) {
    iallgather(send, recv).wait();
  }
  template <class T, class... P, class... Q>
  Request ialltoallv(const Kokkos::View<T*, P...>& send, const std::vector<int>& sc, const std::vector<int>& sd,
                     const Kokkos::View<T*, Q...>& recv, const std::vector<int>& rc, const std::vector<int>& rd);
  template <class T, class... P, class... Q>
  void alltoallv(const Kokkos::View<T*, P...>& send, const std::vector<int>& sc, const std::vector<int>& sd,
                 const Kokkos::View<T*, Q...>& recv, const std::vector<int>& rc, const std::vector<int>& rd) {
    ialltoallv(send, sc, sd, recv, rc, rd).wait();
  }
  template <class T, class... P>
  Request ibroadcast(const Kokkos::View<T*, P...>& v, int root);
  template <class T, class... P>
  void broadcast(const Kokkos::View<T*, P...>& v, int root) {
    ibroadcast(v, root).wait();
  }
  template <class T, class... P>
  Request isend(const Kokkos::View<T*, P...>& v, int dest, int tag = 0);
  template <class T, class... P>
  void send(const Kokkos::View<T*, P...>& v, int dest, int tag = 0) {
    isend(v, dest, tag).wait();
  }
  template <class T, class... P>
  Request irecv(const Kokkos::View<T*, P...>& v, int src, int tag = 0);
  template <class T, class... P>
  void recv(const Kokkos::View<T*, P...>& v, int src, int tag = 0) {
    irecv(v, src, tag).wait();
  }
  template <class T, class... P, class... Q>
  Request isendrecv(const Kokkos::View<T*, P...>& send, int dest, const Kokkos::View<T*, Q...>& recv, int src,
                    int tag = 0);
};

// MPI backend over a duplicate of `comm` (collective). Device Views are
// staged through host mirrors (MPICH here is not GPU-aware).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);
// NCCL backend (collective over `comm`); throws exa::Error in builds without
// NCCL or when no GPU is visible.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm);
bool nccl_available();  // compiled with NCCL and a GPU is visible
// The communicator for a parallel strategy's bulk traffic (data, tensor
// and expert parallelism, hierarchical collectives, the pipeline's
// channels, the context-parallel attention): NCCL for Backend::Nccl, else MPI, or, when the environment
// sets EXAMOE_ORDERED_COMM=1, the ordered test double
// (ordered_communicator.hpp) that gives MPI builds NCCL's ordering rules.
std::unique_ptr<Communicator> make_transport(MPI_Comm comm, Backend backend);
// The backend() name of what make_transport gives for `backend`.
const char* transport_name(Backend backend);

// ---------------------------------------------------------------------------
// View staging.
namespace detail {

template <class V>
constexpr bool host_accessible() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible;
}
template <class V>
constexpr bool device_accessible() {
  return Kokkos::SpaceAccessibility<exa::ExecSpace, typename V::memory_space>::accessible;
}

// A contiguous copy of View `v` in the memory the communicator reads, or `v`
// itself when it already lives there. `in`: copy the contents in.
template <class V>
struct Staged {
  using T = typename V::non_const_value_type;
  T* ptr = nullptr;
  std::function<void()> copy_back;  // set when staged and `out`
  std::shared_ptr<void> hold;       // keeps the staging buffer alive
};

template <class V>
Staged<V> stage(const Communicator& c, const V& v, bool in, bool out) {
  using T = typename V::non_const_value_type;
  static_assert(V::rank == 1, "collectives take rank-1 Views");
  Staged<V> s;
  if (!v.span_is_contiguous()) {
    throw std::invalid_argument("exa::comm: collectives need contiguous Views");
  }
  const bool ok = c.device_memory() ? device_accessible<V>() : host_accessible<V>();
  if (ok) {
    s.ptr = const_cast<T*>(v.data());
    return s;
  }
  auto make = [&](auto space_tag) {
    using Space = decltype(space_tag);
    auto buf = std::make_shared<Kokkos::View<T*, Kokkos::LayoutRight, Space>>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::comm::staging"), v.extent(0));
    if (in) Kokkos::deep_copy(*buf, v);
    s.ptr = buf->data();
    if constexpr (!std::is_const_v<typename V::value_type>) {
      if (out) {
        auto dst = v;
        s.copy_back = [dst, buf]() { Kokkos::deep_copy(dst, *buf); };
      }
    }
    s.hold = buf;
  };
  if (c.device_memory()) {
    make(exa::MemSpace{});
  } else {
    make(Kokkos::HostSpace{});
  }
  return s;
}

template <class V>
Request finish(Request r, Staged<V>& s) {
  if (s.hold) r.keep(s.hold);
  if (s.copy_back) r.then(std::move(s.copy_back));
  return r;
}

}  // namespace detail

template <class T, class... P>
Request Communicator::iallreduce(const Kokkos::View<T*, P...>& v, ReduceOp op) {
  auto s = detail::stage(*this, v, true, true);
  Request r = iallreduce(static_cast<const void*>(s.ptr), static_cast<void*>(s.ptr), v.extent(0), dtype_of<T>(), op);
  return detail::finish(std::move(r), s);
}

template <class T, class... P, class... Q>
Request Communicator::ireduce_scatter(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv,
                                      ReduceOp op) {
  if (send.extent(0) != recv.extent(0) * static_cast<std::size_t>(size())) {
    throw std::invalid_argument("exa::comm::reduce_scatter: send must hold size() * recv.extent(0) elements");
  }
  auto a = detail::stage(*this, send, true, false);
  auto b = detail::stage(*this, recv, false, true);
  Request r = ireduce_scatter(static_cast<const void*>(a.ptr), static_cast<void*>(b.ptr), recv.extent(0),
                              dtype_of<T>(), op);
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}

template <class T, class... P, class... Q>
Request Communicator::iallgather(const Kokkos::View<T*, P...>& send, const Kokkos::View<T*, Q...>& recv) {
  if (recv.extent(0) != send.extent(0) * static_cast<std::size_t>(size())) {
    throw std::invalid_argument("exa::comm::allgather: recv must hold size() * send.extent(0) elements");
  }
  auto a = detail::stage(*this, send, true, false);
  auto b = detail::stage(*this, recv, false, true);
  Request r = iallgather(static_cast<const void*>(a.ptr), static_cast<void*>(b.ptr), send.extent(0), dtype_of<T>());
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}

template <class T, class... P, class... Q>
Request Communicator::ialltoallv(const Kokkos::View<T*, P...>& send, const std::vector<int>& sc,
                                 const std::vector<int>& sd, const Kokkos::View<T*, Q...>& recv,
                                 const std::vector<int>& rc, const std::vector<int>& rd) {
  auto a = detail::stage(*this, send, true, false);
  auto b = detail::stage(*this, recv, false, true);
  Request r = ialltoallv(static_cast<const void*>(a.ptr), sc, sd, static_cast<void*>(b.ptr), rc, rd, dtype_of<T>());
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}

template <class T, class... P>
Request Communicator::ibroadcast(const Kokkos::View<T*, P...>& v, int root) {
  auto s = detail::stage(*this, v, true, true);
  Request r = ibroadcast(static_cast<void*>(s.ptr), v.extent(0), dtype_of<T>(), root);
  return detail::finish(std::move(r), s);
}

template <class T, class... P>
Request Communicator::isend(const Kokkos::View<T*, P...>& v, int dest, int tag) {
  auto s = detail::stage(*this, v, true, false);
  Request r = isend(static_cast<const void*>(s.ptr), v.extent(0), dtype_of<T>(), dest, tag);
  return detail::finish(std::move(r), s);
}

template <class T, class... P>
Request Communicator::irecv(const Kokkos::View<T*, P...>& v, int src, int tag) {
  auto s = detail::stage(*this, v, false, true);
  Request r = irecv(static_cast<void*>(s.ptr), v.extent(0), dtype_of<T>(), src, tag);
  return detail::finish(std::move(r), s);
}

template <class T, class... P, class... Q>
Request Communicator::isendrecv(const Kokkos::View<T*, P...>& send, int dest, const Kokkos::View<T*, Q...>& recv,
                                int src, int tag) {
  static_assert(std::is_same_v<std::remove_cv_t<T>, typename Kokkos::View<T*, Q...>::non_const_value_type>,
                "isendrecv: one element type");
  auto a = detail::stage(*this, send, true, false);
  auto b = detail::stage(*this, recv, false, true);
  Request r = isendrecv(static_cast<const void*>(a.ptr), send.extent(0), dest, static_cast<void*>(b.ptr),
                        recv.extent(0), src, dtype_of<T>(), tag);
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}

}  // namespace exa::comm
