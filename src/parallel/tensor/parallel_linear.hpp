#pragma once
// The Linear seam under tensor parallelism (Megatron's column/row scheme,
// docs/architecture.md "Tensor parallelism"). Every rank of the TP group
// holds the same input rows.
//
//   column  W [out/tp, in] (wq/wk/wv by heads, w1/w3, the shared experts'
//           w1/w3, the vocabulary-parallel LM head): forward is local and
//           gives this rank's output columns; the input gradient is a
//           partial sum, allreduced.
//   row     W [out, in/tp] (wo, w2): the input is this rank's columns, the
//           output a partial sum, allreduced; the input gradient is local.
//   replicated  W whole on every rank (the router): forward and input
//           gradient local, the weight gradient summed over this rank's
//           1/tp of the rows only; the TP gradient reduction adds the parts.
#include <memory>
#include <utility>

#include "kernels/gemm.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/seams/linear.hpp"
#include "parallel/tensor/tp_comm.hpp"
#include "parallel/tensor/tp_kernels.hpp"

namespace exa::parallel {

namespace tp_detail {
// A [rows, cols] scratch view of `buf`, regrown when too small.
template <class V2>
V2 scratch(V2& buf, std::size_t rows, std::size_t cols) {
  if (buf.extent(0) * buf.extent(1) < rows * cols) buf = V2("exa::tp::scratch", rows, cols);
  return V2(buf.data(), rows, cols);
}
}  // namespace tp_detail

template <class T, class D = Device>
class ColumnParallelLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;
  using Buf = Kokkos::View<T**, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  // overlap (comm.overlap): in backward(), the weight-gradient GEMM runs
  // while the input gradient's allreduce is in flight.
  explicit ColumnParallelLinear(std::shared_ptr<const TpComm> tp, bool overlap = true)
      : tp_(std::move(tp)), overlap_(overlap) {}

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false) const override {
    kernels::gemm('N', 'T', T(1), x, w, accumulate ? T(1) : T(0), y);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false) const override {
    const auto t = tp_detail::scratch(buf_, dx.extent(0), dx.extent(1));
    kernels::gemm('N', 'N', T(1), dy, w, T(0), t);
    tp_->allreduce(t);
    tp_detail::assign_or_add(dx, t, accumulate);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true) const override {
    kernels::gemm('T', 'N', T(1), dy, x, accumulate ? T(1) : T(0), dw);
  }
  void backward(const Act& x, const Wt& w, const Act& dy, const Act& dx, const Wt& dw,
                bool accumulate_dx = false) const override {
    if (!overlap_ || dx.data() == nullptr) {
      model::Linear<T, D>::backward(x, w, dy, dx, dw, accumulate_dx);
      return;
    }
    const auto t = tp_detail::scratch(buf_, dx.extent(0), dx.extent(1));
    kernels::gemm('N', 'N', T(1), dy, w, T(0), t);
    auto pending = tp_->iallreduce(t);
    backward_weight(x, dy, dw, true);
    TpComm::wait(pending);
    tp_detail::assign_or_add(dx, t, accumulate_dx);
  }

 private:
  std::shared_ptr<const TpComm> tp_;
  bool overlap_;
  mutable Kokkos::View<T**, Layout, D> buf_;
};

template <class T, class D = Device>
class RowParallelLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;

  explicit RowParallelLinear(std::shared_ptr<const TpComm> tp) : tp_(std::move(tp)) {}

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false) const override {
    const auto t = tp_detail::scratch(buf_, y.extent(0), y.extent(1));
    kernels::gemm('N', 'T', T(1), x, w, T(0), t);
    tp_->allreduce(t);
    tp_detail::assign_or_add(y, t, accumulate);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false) const override {
    kernels::gemm('N', 'N', T(1), dy, w, accumulate ? T(1) : T(0), dx);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true) const override {
    kernels::gemm('T', 'N', T(1), dy, x, accumulate ? T(1) : T(0), dw);
  }

 private:
  std::shared_ptr<const TpComm> tp_;
  mutable Kokkos::View<T**, Layout, D> buf_;
};

template <class T, class D = Device>
class ReplicatedLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;

  explicit ReplicatedLinear(model::RowShare share) : share_(share) {}

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false) const override {
    kernels::gemm('N', 'T', T(1), x, w, accumulate ? T(1) : T(0), y);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false) const override {
    kernels::gemm('N', 'N', T(1), dy, w, accumulate ? T(1) : T(0), dx);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true) const override {
    const auto [r0, r1] = share_.rows(std::int64_t(x.extent(0)));
    const auto r = Kokkos::make_pair(std::size_t(r0), std::size_t(r1));
    kernels::gemm('T', 'N', T(1), Kokkos::subview(dy, r, Kokkos::ALL), Kokkos::subview(x, r, Kokkos::ALL),
                  accumulate ? T(1) : T(0), dw);
  }

 private:
  model::RowShare share_;
};

}  // namespace exa::parallel
