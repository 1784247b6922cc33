#pragma once
// TpComm: the tensor-parallel group's communicator as the TP seams use it
// (docs/architecture.md, "Tensor parallelism"): in-place sums and maxima of
// contiguous activation buffers and, for sequence parallelism, the
// allgather and reduce-scatter of row blocks (rank r holds rows
// [r n, (r+1) n) of a [tp n, c] matrix). Every call is charged to a comm/tp_*
// phase so the step record counts it as exposed communication.
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/traffic_ledger.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "core/types.hpp"

namespace exa::parallel::tensor {

class TpComm {
 public:
  explicit TpComm(std::shared_ptr<comm::Communicator> c) : comm_(std::move(c)) {
    EXA_REQUIRE(comm_ != nullptr, "TpComm: no communicator");
  }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  comm::Communicator& comm() const { return *comm_; }

  // v (+)= over the group, in place; v must be contiguous.
  template <class V>
  void allreduce(const V& v, comm::ReduceOp op = comm::ReduceOp::Sum) const {
    auto r = iallreduce(v, op);
    wait(r);
  }
  // The same, nonblocking: v stays untouched until wait(request).
  template <class V>
  comm::Request iallreduce(const V& v, comm::ReduceOp op = comm::ReduceOp::Sum) const {
    if (v.size() == 0) return {};
    ScopedRegion region("comm/tp_allreduce");
    Kokkos::fence();
    count(comm::ring_allreduce_bytes(size(), std::int64_t(v.size()), sizeof(typename V::value_type)));
    return comm_->iallreduce(flat(v), op);
  }
  // full [size() n, c] = the ranks' local [n, c] blocks in rank order.
  template <class L, class F>
  void allgather_rows(const L& local, const F& full) const {
    auto r = iallgather_rows(local, full);
    wait(r);
  }
  // The same, nonblocking: full stays unread until wait(request).
  template <class L, class F>
  comm::Request iallgather_rows(const L& local, const F& full) const {
    require_row_blocks(local, full, "allgather");
    ScopedRegion region("comm/tp_allgather");
    Kokkos::fence();
    count(comm::ring_block_bytes(size(), std::int64_t(local.size()), sizeof(typename L::value_type)));
    return comm_->iallgather(flat(local), flat(full));
  }
  // The allgather split by source rank (the chunked gather of the overlapped
  // column-parallel forward): one broadcast per rank s, posted in rank order
  // on every rank, of s's [n, c] block into rows [s n, (s+1) n) of full; the
  // own block is sent from `local` and not copied into full. Request s
  // completes with block s, so its rows can be used while later ones travel.
  template <class L, class F>
  std::vector<comm::Request> ibroadcast_row_blocks(const L& local, const F& full) const {
    require_row_blocks(local, full, "allgather");
    ScopedRegion region("comm/tp_allgather");
    Kokkos::fence();
    const std::size_t n = local.extent(0);
    count(comm::ring_block_bytes(size(), std::int64_t(local.size()), sizeof(typename L::value_type)));  // as the allgather
    std::vector<comm::Request> parts;
    for (int s = 0; s < size(); ++s) {
      if (s == rank()) {
        parts.push_back(comm_->ibroadcast(flat(local), s));
      } else {
        const auto block = Kokkos::subview(full, Kokkos::make_pair(n * std::size_t(s), n * std::size_t(s + 1)),
                                           Kokkos::ALL);
        parts.push_back(comm_->ibroadcast(flat(block), s));
      }
    }
    return parts;
  }
  // Tests every request once. MPI moves a nonblocking operation only inside
  // an MPI call (no progress thread), so a rank calls this between the
  // GEMMs it overlaps with communication: each test lets pending
  // handshakes and transfers advance before the next GEMM.
  static void progress(std::vector<comm::Request>& rs) {
    ScopedRegion region("comm/tp_progress");
    for (auto& r : rs) r.test();
  }
  // local [n, c] = rows [rank() n, (rank()+1) n) of the sum of the ranks'
  // full [size() n, c]; nonblocking.
  template <class F, class L>
  comm::Request ireduce_scatter_rows(const F& full, const L& local) const {
    EXA_REQUIRE(full.extent(0) == local.extent(0) * std::size_t(size()) && full.extent(1) == local.extent(1),
                "TpComm: reduce-scatter of [{}, {}] into [{}, {}] row blocks", full.extent(0), full.extent(1),
                local.extent(0), local.extent(1));
    ScopedRegion region("comm/tp_reduce_scatter");
    Kokkos::fence();
    count(comm::ring_block_bytes(size(), std::int64_t(local.size()), sizeof(typename L::value_type)));
    return comm_->ireduce_scatter(flat(full), flat(local));
  }
  // The bytes ledger (comm/traffic_ledger.hpp): this rank's sends.
  static void count(double bytes) { comm::TrafficLedger::sent(comm::Traffic::Tp, bytes); }
  // Time spent here is exposed communication (what overlap did not hide).
  static void wait(comm::Request& r) {
    ScopedRegion region("comm/tp_wait");
    r.wait();
  }

 private:
  template <class L, class F>
  void require_row_blocks(const L& local, const F& full, const char* what) const {
    EXA_REQUIRE(full.extent(0) == local.extent(0) * std::size_t(size()) && full.extent(1) == local.extent(1),
                "TpComm: {} of [{}, {}] row blocks into [{}, {}]", what, local.extent(0), local.extent(1),
                full.extent(0), full.extent(1));
  }
  template <class V>
  static auto flat(const V& v) {
    using T = typename V::value_type;
    EXA_REQUIRE(v.span_is_contiguous(), "TpComm: the buffer must be contiguous");
    return Kokkos::View<T*, Layout, typename V::device_type, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(),
                                                                                                       v.size());
  }
  std::shared_ptr<comm::Communicator> comm_;
};

}  // namespace exa::parallel::tensor
