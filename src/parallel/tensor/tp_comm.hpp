#pragma once
// TpComm: the tensor-parallel group's communicator as the TP seams use it
// (docs/architecture.md, "Tensor parallelism"): in-place sums and maxima of
// contiguous activation buffers, each charged to a comm/tp_* phase so the
// step record counts it as exposed communication.
#include <memory>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "core/types.hpp"

namespace exa::parallel {

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
    using T = typename V::non_const_value_type;
    EXA_REQUIRE(v.span_is_contiguous(), "TpComm: the buffer must be contiguous");
    if (v.size() == 0) return {};
    ScopedRegion region("comm/tp_allreduce");
    Kokkos::fence();
    Kokkos::View<T*, Layout, typename V::device_type, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat(v.data(),
                                                                                                     v.size());
    return comm_->iallreduce(flat, op);
  }
  // Time spent here is exposed communication (what overlap did not hide).
  static void wait(comm::Request& r) {
    ScopedRegion region("comm/tp_allreduce");
    r.wait();
  }

 private:
  std::shared_ptr<comm::Communicator> comm_;
};

}  // namespace exa::parallel
