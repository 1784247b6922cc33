#pragma once
// The routed experts under tensor parallelism. With expert tensor
// parallelism (parallel.etp > 1) every expert's F is split over a block of
// etp TP ranks (all of them when etp = tp; expert_tp_group.hpp) in the
// column/row scheme (w1/w3 [E,F/etp,d], w2 [E,d,F/etp]): the wrapped
// dispatcher (local, or the all-to-all of expert parallelism) runs
// unchanged on the local columns, and its output and its input and gate
// gradients are partial sums over the block, reduced here. The routing is
// the same on every TP rank (same tokens, replicated router), and each of
// the tp/etp blocks computes the same sums.
//
// Under sequence parallelism the block's input and output hold this rank's
// rows only: the input is allgathered before dispatch and the output
// reduce-scattered (etp = tp), or summed over the block (1 < etp < tp) and
// cut to the own rows (also whole experts, etp = 1), and the other way
// round in the backward.
#include <memory>

#include "model/seams/token_dispatcher.hpp"
#include "parallel/tensor/tp_comm.hpp"
#include "parallel/tensor/tp_kernels.hpp"

namespace exa::parallel::tensor {

template <class T, class D = Device>
class ExpertTensorParallelDispatcher final : public model::TokenDispatcher<T, D> {
 public:
  using typename model::TokenDispatcher<T, D>::V2;

  // etp: the block of ranks splitting the experts (tp itself when etp =
  // tp); null when experts are whole and only sequence parallelism brings
  // this wrapper in.
  ExpertTensorParallelDispatcher(std::shared_ptr<model::TokenDispatcher<T, D>> inner, std::shared_ptr<const TpComm> tp,
                                 std::shared_ptr<const TpComm> etp)
      : inner_(std::move(inner)), tp_(std::move(tp)), etp_(std::move(etp)) {}

  using typename model::TokenDispatcher<T, D>::Meanwhile;

  void forward(model::LayerContext<T, D>& c, const model::LayerWeights<T, D>& w, std::int64_t capacity,
               const V2& xn, const V2& y, const Meanwhile& meanwhile = {}) override {
    const std::size_t n = c.topk.extent(0);  // every token of the micro-batch
    const V2 gxn = whole(xn, n, gx_);
    const V2 gy = y.extent(0) == n ? y : scratch(gy_, n, y.extent(1));
    inner_->forward(c, w, capacity, gxn, gy, meanwhile);
    to_local(gy, y);
  }
  void backward(model::LayerContext<T, D>& c, const model::LayerWeights<T, D>& w,
                const model::LayerWeights<T, D>& g, const V2& dy, const V2& dxn, const V2& dgates,
                const Meanwhile& meanwhile = {}) override {
    const std::size_t n = c.topk.extent(0);
    const V2 gdy = whole(dy, n, gdy_);
    const V2 gdxn = dxn.extent(0) == n ? dxn : scratch(gdxn_, n, dxn.extent(1));
    inner_->backward(c, w, g, gdy, gdxn, dgates, meanwhile);
    to_local(gdxn, dxn);
    if (etp_) etp_->allreduce(dgates);  // each rank's part of every expert's output
  }
  std::size_t scratch_bytes() const override {
    return inner_->scratch_bytes() + (gx_.span() + gy_.span() + gdy_.span() + gdxn_.span()) * sizeof(T);
  }
  bool stores_bf16() const override { return inner_->stores_bf16(); }
  bool keeps_permuted_rows() const override { return inner_->keeps_permuted_rows(); }

 private:
  static V2 scratch(V2& buf, std::size_t rows, std::size_t cols) {
    if (buf.extent(0) != rows || buf.extent(1) != cols) buf = V2("exa::tp::dispatch_scratch", rows, cols);
    return buf;
  }
  V2 whole(const V2& x, std::size_t n, V2& buf) const {
    if (x.extent(0) == n) return x;
    const V2 g = scratch(buf, n, x.extent(1));
    tp_->allgather_rows(x, g);
    return g;
  }
  // full [N,d] (a partial sum when the experts are split) into local, which
  // is full itself or this rank's rows.
  void to_local(const V2& full, const V2& local) {
    if (local.extent(0) == full.extent(0)) {
      if (etp_) etp_->allreduce(local);
      return;
    }
    if (etp_ && etp_->size() == tp_->size()) {
      auto r = tp_->ireduce_scatter_rows(full, local);
      TpComm::wait(r);
      return;
    }
    if (etp_) etp_->allreduce(full);
    const std::size_t r0 = local.extent(0) * std::size_t(tp_->rank());
    Kokkos::deep_copy(local, Kokkos::subview(full, Kokkos::make_pair(r0, r0 + local.extent(0)), Kokkos::ALL));
  }

  std::shared_ptr<model::TokenDispatcher<T, D>> inner_;
  std::shared_ptr<const TpComm> tp_, etp_;
  V2 gx_, gy_, gdy_, gdxn_;
};

}  // namespace exa::parallel::tensor
