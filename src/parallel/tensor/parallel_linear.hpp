#pragma once
// The Linear seam under tensor parallelism (Megatron's column/row scheme,
// docs/architecture.md "Tensor parallelism").
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
//
// Sequence parallelism is read from the shapes: a token-side operand (the
// column input, the row output) with 1/tp of the rows of the other side is
// this rank's block of the sequence. The column-parallel input is then
// allgathered before the GEMMs (forward and weight gradient) and its input
// gradient reduce-scattered instead of allreduced; the row-parallel output
// is reduce-scattered and its gradient allgathered; the router reads the
// gathered input and takes the gradients of its own rows.
//
// With overlap (comm.overlap) and sequence parallelism the column-parallel
// forward gathers its input by source rank: output rows [s n, (s+1) n) are
// x_s W^T, so the own block's GEMM runs first, while the other blocks
// travel, then each block's GEMM as soon as it has arrived (the same
// products as the unchunked GEMM, row block by row block). Its backward
// posts the input's allgather before the input-gradient GEMM and runs the
// weight-gradient GEMM during the input gradient's reduce-scatter.
#include <memory>
#include <utility>

#include "kernels/gemm.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"
#include "parallel/tensor/tp_comm.hpp"
#include "parallel/tensor/tp_kernels.hpp"

namespace exa::parallel::tensor {

namespace tp_detail {
// A [rows, cols] scratch view of `buf`, regrown when too small.
template <class V2>
V2 scratch(V2& buf, std::size_t rows, std::size_t cols) {
  if (buf.extent(0) * buf.extent(1) < rows * cols) buf = V2("exa::tp::scratch", rows, cols);
  return V2(buf.data(), rows, cols);
}
// `x` when it has `rows` rows, else the rank-ordered gather of every rank's
// x (sequence parallelism) into `buf`.
template <class V2, class X>
V2 gathered(const TpComm& tp, const X& x, std::size_t rows, V2& buf) {
  if (x.extent(0) == rows) return x;
  EXA_REQUIRE(x.extent(0) * std::size_t(tp.size()) == rows,
              "tensor parallelism: {} rows against {} on the other side of the product (sequence parallelism "
              "holds 1/{} of them)", x.extent(0), rows, tp.size());
  const auto g = scratch(buf, rows, x.extent(1));
  tp.allgather_rows(x, g);
  return g;
}
// y (+)= t: whole when the rows agree, else y gets this rank's block of the
// sum over ranks (reduce-scatter), otherwise the allreduce. Nonblocking
// until finish(): `wait` completes it.
template <class V2>
struct Reduced {
  comm::Request pending;
  V2 sum;  // t itself (allreduce) or the reduce-scatter's local block
  void finish(const V2& y, bool accumulate) {
    TpComm::wait(pending);
    assign_or_add(y, sum, accumulate);
  }
};
template <class V2, class Y>
Reduced<V2> start_reduce(const TpComm& tp, const V2& t, const Y& y, V2& block_buf) {
  Reduced<V2> r;
  if (y.extent(0) == t.extent(0)) {
    r.pending = tp.iallreduce(t);
    r.sum = t;
  } else {
    r.sum = scratch(block_buf, y.extent(0), y.extent(1));
    r.pending = tp.ireduce_scatter_rows(t, r.sum);
  }
  return r;
}
}  // namespace tp_detail

template <class T, class D = Device>
class ColumnParallelLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;
  using typename model::Linear<T, D>::Adapter;

  // overlap (comm.overlap): in backward(), the weight-gradient GEMM runs
  // while the input gradient's reduction is in flight.
  explicit ColumnParallelLinear(std::shared_ptr<const TpComm> tp, bool overlap = true)
      : tp_(std::move(tp)), overlap_(overlap) {}

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
               const Adapter& ad = {}) const override {
    if (overlap_ && x.extent(0) != y.extent(0)) {
      forward_chunked(x, w, y, accumulate, ad);
      return;
    }
    const Act gx = tp_detail::gathered(*tp_, x, y.extent(0), gx_);
    kernels::gemm('N', 'T', T(1), gx, w, accumulate ? T(1) : T(0), y);
    if (ad) model::lora::forward(gx, ad, y, lora_);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                      const Adapter& ad = {}) const override {
    auto r = partial_input_grad(dy, w, dx, ad);
    r.finish(dx, accumulate);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                       const Adapter& ad = {}) const override {
    if (dw.data() == nullptr && !ad) return;  // frozen, no adapter: nothing to gather for
    const Act gx = tp_detail::gathered(*tp_, x, dy.extent(0), gx_);
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), dy, gx, accumulate ? T(1) : T(0), dw);
    if (ad) model::lora::backward_weight(gx, dy, ad, accumulate, lora_);
  }
  std::pair<Act, Act> weight_operands(const Act& x, const Act& dy) const override {
    return {tp_detail::gathered(*tp_, x, dy.extent(0), gx_), dy};
  }
  void backward(const Act& x, const Wt& w, const Act& dy, const Act& dx, const Wt& dw,
                bool accumulate_dx = false, const Adapter& ad = {}) const override {
    if (!overlap_ || dx.data() == nullptr || (dw.data() == nullptr && !ad)) {
      model::Linear<T, D>::backward(x, w, dy, dx, dw, accumulate_dx, ad);
      return;
    }
    if (x.extent(0) == dy.extent(0)) {
      auto r = partial_input_grad(dy, w, dx, ad);
      backward_weight(x, dy, dw, true, ad);
      r.finish(dx, accumulate_dx);
      return;
    }
    const Act gx = tp_detail::scratch(gx_, dy.extent(0), x.extent(1));
    auto gather = tp_->iallgather_rows(x, gx);  // in flight during the input-gradient GEMM
    auto r = partial_input_grad(dy, w, dx, ad);
    TpComm::wait(gather);
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), dy, gx, T(1), dw);  // during the reduce-scatter
    if (ad) model::lora::backward_weight(gx, dy, ad, true, lora_);
    r.finish(dx, accumulate_dx);
  }

 private:
  // y (+)= [x_0; ..; x_{tp-1}] W^T, block s computed once it has arrived.
  void forward_chunked(const Act& x, const Wt& w, const Act& y, bool accumulate, const Adapter& ad) const {
    const std::size_t n = x.extent(0), p = std::size_t(tp_->size()), me = std::size_t(tp_->rank());
    const Act gx = tp_detail::scratch(gx_, y.extent(0), x.extent(1));
    auto parts = tp_->ibroadcast_row_blocks(x, gx);
    const auto rows = [n](std::size_t s) { return Kokkos::make_pair(s * n, (s + 1) * n); };
    const T beta = accumulate ? T(1) : T(0);
    const auto block = [&](const auto& xs, std::size_t s) {
      const auto ys = Kokkos::subview(y, rows(s), Kokkos::ALL);
      kernels::gemm('N', 'T', T(1), xs, w, beta, ys);
      if (ad) model::lora::forward(xs, ad, ys, lora_, s * n);  // block s: rows s n.. of the input
    };
    block(x, me);
    for (std::size_t k = 1; k < p; ++k) {
      const std::size_t s = (me + k) % p;  // the ring order spreads the sources' load
      TpComm::wait(parts[s]);
      TpComm::progress(parts);
      block(Kokkos::subview(gx, rows(s), Kokkos::ALL), s);
    }
    TpComm::wait(parts[me]);  // the own block's sends
  }
  tp_detail::Reduced<Act> partial_input_grad(const Act& dy, const Wt& w, const Act& dx, const Adapter& ad) const {
    const auto t = tp_detail::scratch(buf_, dy.extent(0), dx.extent(1));
    kernels::gemm('N', 'N', T(1), dy, w, T(0), t);
    if (ad) model::lora::backward_input(dy, ad, t, lora_);  // partial over the output columns, reduced with W's
    return tp_detail::start_reduce(*tp_, t, dx, block_);
  }
  std::shared_ptr<const TpComm> tp_;
  bool overlap_;
  mutable Act buf_, block_, gx_;
  mutable model::lora::Scratch<T, D> lora_;  // the adapters' products
};

template <class T, class D = Device>
class RowParallelLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;
  using typename model::Linear<T, D>::Adapter;

  explicit RowParallelLinear(std::shared_ptr<const TpComm> tp) : tp_(std::move(tp)) {}

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
               const Adapter& ad = {}) const override {
    const auto t = tp_detail::scratch(buf_, x.extent(0), y.extent(1));
    kernels::gemm('N', 'T', T(1), x, w, T(0), t);
    if (ad) model::lora::forward(x, ad, t, lora_);  // a partial sum over the input columns, reduced with W's
    auto r = tp_detail::start_reduce(*tp_, t, y, block_);
    r.finish(y, accumulate);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                      const Adapter& ad = {}) const override {
    const Act gdy = tp_detail::gathered(*tp_, dy, dx.extent(0), gdy_);
    kernels::gemm('N', 'N', T(1), gdy, w, accumulate ? T(1) : T(0), dx);
    if (ad) model::lora::backward_input(gdy, ad, dx, lora_);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                       const Adapter& ad = {}) const override {
    if (dw.data() == nullptr && !ad) return;  // frozen, no adapter
    const Act gdy = tp_detail::gathered(*tp_, dy, x.extent(0), gdy_);
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), gdy, x, accumulate ? T(1) : T(0), dw);
    if (ad) model::lora::backward_weight(x, gdy, ad, accumulate, lora_);
  }
  std::pair<Act, Act> weight_operands(const Act& x, const Act& dy) const override {
    return {x, tp_detail::gathered(*tp_, dy, x.extent(0), gdy_)};
  }
  void backward(const Act& x, const Wt& w, const Act& dy, const Act& dx, const Wt& dw,
                bool accumulate_dx = false, const Adapter& ad = {}) const override {
    const Act gdy = tp_detail::gathered(*tp_, dy, x.extent(0), gdy_);  // once for both products
    if (dx.data() != nullptr) {
      kernels::gemm('N', 'N', T(1), gdy, w, accumulate_dx ? T(1) : T(0), dx);
      if (ad) model::lora::backward_input(gdy, ad, dx, lora_);
    }
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), gdy, x, T(1), dw);
    if (ad) model::lora::backward_weight(x, gdy, ad, true, lora_);
  }

 private:
  std::shared_ptr<const TpComm> tp_;
  mutable Act buf_, block_, gdy_;
  mutable model::lora::Scratch<T, D> lora_;  // the adapters' products
};

template <class T, class D = Device>
class ReplicatedLinear final : public model::Linear<T, D> {
 public:
  using typename model::Linear<T, D>::Act;
  using typename model::Linear<T, D>::Wt;

  // `share`: this rank's part of the rows when every rank holds them all.
  using typename model::Linear<T, D>::Adapter;

  ReplicatedLinear(std::shared_ptr<const TpComm> tp, model::RowShare share) : tp_(std::move(tp)), share_(share) {}

  // The router's adapters (lora.targets = router) are whole on every rank
  // like W and take the same share of the rows for their gradients, which
  // the TP gradient reduction adds up.
  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
               const Adapter& ad = {}) const override {
    const Act gx = tp_detail::gathered(*tp_, x, y.extent(0), gx_);
    kernels::gemm('N', 'T', T(1), gx, w, accumulate ? T(1) : T(0), y);
    if (ad) model::lora::forward(gx, ad, y, lora_);
  }
  // Under sequence parallelism dx holds this rank's rows: the product of
  // dy's same rows (dy is whole and equal on every rank).
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                      const Adapter& ad = {}) const override {
    const Act dyo = own_rows(dy, dx.extent(0));
    kernels::gemm('N', 'N', T(1), dyo, w, accumulate ? T(1) : T(0), dx);
    if (ad) model::lora::backward_input(dyo, ad, dx, lora_, own_row0(dy, dx.extent(0)));
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                       const Adapter& ad = {}) const override {
    if (dw.data() == nullptr && !ad) return;  // frozen, no adapter
    const bool split = x.extent(0) != dy.extent(0);
    const auto [r0, r1] = split ? std::pair<std::int64_t, std::int64_t>{0, std::int64_t(x.extent(0))}
                                : share_.rows(std::int64_t(x.extent(0)));
    const auto r = Kokkos::make_pair(std::size_t(r0), std::size_t(r1));
    const Act dyr = Kokkos::subview(own_rows(dy, x.extent(0)), r, Kokkos::ALL);
    const Act xr = Kokkos::subview(x, r, Kokkos::ALL);
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), dyr, xr, accumulate ? T(1) : T(0), dw);
    // xr's rows of the whole sequence: this rank's block's, or its share's.
    if (ad) model::lora::backward_weight(xr, dyr, ad, accumulate, lora_, split ? own_row0(dy, x.extent(0)) : std::size_t(r0));
  }

 private:
  std::size_t own_row0(const Act& dy, std::size_t n) const {
    return n == dy.extent(0) ? 0 : n * std::size_t(tp_->rank());
  }
  // The rows of a whole-sequence dy that belong to a local operand of `n`
  // rows (all of dy when n covers it).
  Act own_rows(const Act& dy, std::size_t n) const {
    if (n == dy.extent(0)) return dy;
    const std::size_t r0 = n * std::size_t(tp_->rank());
    return Kokkos::subview(dy, Kokkos::make_pair(r0, r0 + n), Kokkos::ALL);
  }
  std::shared_ptr<const TpComm> tp_;
  model::RowShare share_;
  mutable Act gx_;
  mutable model::lora::Scratch<T, D> lora_;  // the adapters' products
};

}  // namespace exa::parallel::tensor
