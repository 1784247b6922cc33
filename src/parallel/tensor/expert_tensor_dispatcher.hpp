#pragma once
// Expert tensor parallelism (parallel.etp = tp): every routed expert's F is
// split over the TP group in the column/row scheme (w1/w3 [E,F/etp,d],
// w2 [E,d,F/etp]). The wrapped dispatcher (local, or the all-to-all of
// expert parallelism) runs unchanged on the local columns; its output and
// its input and gate gradients are then partial sums over the group, allreduced here.
// The routing is the same on every TP rank (same tokens, replicated router).
#include <memory>

#include "model/seams/token_dispatcher.hpp"
#include "parallel/tensor/tp_comm.hpp"

namespace exa::parallel {

template <class T, class D = Device>
class ExpertTensorParallelDispatcher final : public model::TokenDispatcher<T, D> {
 public:
  using typename model::TokenDispatcher<T, D>::V2;

  ExpertTensorParallelDispatcher(std::shared_ptr<model::TokenDispatcher<T, D>> inner, std::shared_ptr<const TpComm> tp)
      : inner_(std::move(inner)), tp_(std::move(tp)) {}

  void forward(model::LayerContext<T, D>& c, const model::LayerWeights<T, D>& w, std::int64_t capacity,
               const V2& xn, const V2& y) override {
    inner_->forward(c, w, capacity, xn, y);
    tp_->allreduce(y);
  }
  void backward(model::LayerContext<T, D>& c, const model::LayerWeights<T, D>& w,
                const model::LayerWeights<T, D>& g, const V2& dy, const V2& dxn, const V2& dgates) override {
    // Both come out as this rank's part: dxn through its columns of w1/w3,
    // dgates through its part of each expert's output.
    inner_->backward(c, w, g, dy, dxn, dgates);
    tp_->allreduce(dxn);
    tp_->allreduce(dgates);
  }
  std::size_t scratch_bytes() const override { return inner_->scratch_bytes(); }

 private:
  std::shared_ptr<model::TokenDispatcher<T, D>> inner_;
  std::shared_ptr<const TpComm> tp_;
};

}  // namespace exa::parallel
