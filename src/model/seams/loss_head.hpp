#pragma once
// LossHead: the LM head and the cross-entropy over it (docs/architecture.md,
// "Seams"): logits = hf W^T over this rank's vocabulary rows, then the mean
// cross-entropy over the valid targets (target < 0 is ignored). The local
// head holds the whole vocabulary; the vocabulary-parallel head keeps a
// slice of W and reduces the row max, the sum of exponentials and the
// target logit across tensor-parallel ranks instead of gathering logits.
#include <cstdint>

#include "core/types.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/distill.hpp"
#include "model/activation_context.hpp"
#include "model/seams/linear.hpp"
#include "model/weights.hpp"

namespace exa::model {

// The tempered log-sum-exp of the rows of logits (this rank's columns):
// `reduce_max` and `reduce_sum` complete the row max and the sums of
// exponentials over the ranks that hold the other columns (no-ops when
// one rank holds them all).
template <class V2, class V1, class Max, class Sum>
void tempered_lse(const V2& logits, double tau, const V1& lse, const Max& reduce_max, const Sum& reduce_sum) {
  using D = typename V1::device_type;
  const std::size_t n = logits.extent(0);
  V1 mx("exa::distill::row_max", n);
  Kokkos::View<double*, Layout, D> sums("exa::distill::sums", n);
  kernels::distill::row_max(logits, mx);
  reduce_max(mx);
  kernels::distill::sum_exp(logits, mx, tau, sums);
  reduce_sum(sums);
  kernels::distill::finish_lse(mx, sums, tau, lse);
}

template <class T, class D = Device>
class LossHead {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using W2 = typename LayerWeights<T, D>::W2;
  // W's adapter (LoRA on a tied embedding, which the head reads).
  using Adapter = LoraAdapter<T, D>;

  virtual ~LossHead() = default;
  // From c.hf and c.targets: fills c.logits and c.ce_lse, returns the sum and
  // count of the valid targets' cross-entropy.
  virtual kernels::CrossEntropySum forward(StageContext<T, D>& c, const W2& w, const Adapter& ad = {}) const = 0;
  // Gradient of loss_scale * (sum / n_valid): overwrites dhf [N,d],
  // accumulates into dw. Consumes c.logits (they become their gradient).
  virtual void backward(StageContext<T, D>& c, const W2& w, double loss_scale, const V2& dhf, const W2& dw,
                        const Adapter& ad = {}) const = 0;
  // Evaluation: fills c.logits and c.ce_lse, writes each row's
  // cross-entropy into ce [N] (0 for ignored targets).
  virtual void eval(StageContext<T, D>& c, const W2& w, const V1& ce, const Adapter& ad = {}) const = 0;
  // Distillation (docs/architecture.md "Distillation"), after forward() or
  // eval() filled c.logits. The teacher's side: softmax(logits / tau) over
  // the whole vocabulary into probs [N, V local].
  virtual void soft_targets(const StageContext<T, D>& c, double tau, const V2& probs) const = 0;
  // The student's side: fills c.distill.lse and returns the sum, over the
  // rows with a target, of KL(c.distill.probs || softmax(logits / tau)).
  // backward() then adds the gradient of coef tau^2 / n_valid times it.
  virtual double distill(StageContext<T, D>& c) const = 0;
  // Generation: logits [B,V] of the rows h [B,d].
  virtual void logits(const V2& h, const W2& w, const V2& out, const Adapter& ad = {}) const = 0;
};

}  // namespace exa::model
