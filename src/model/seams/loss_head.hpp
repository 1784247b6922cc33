#pragma once
// LossHead: the LM head and the cross-entropy over it (docs/architecture.md,
// "Seams"): logits = hf W^T over this rank's vocabulary rows, then the mean
// cross-entropy over the valid targets (target < 0 is ignored). The local
// head holds the whole vocabulary; the vocabulary-parallel head keeps a
// slice of W and reduces the row max, the sum of exponentials and the
// target logit across tensor-parallel ranks instead of gathering logits.
#include <cstdint>
#include <utility>

#include "core/types.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/distill.hpp"
#include "model/activation_context.hpp"
#include "model/seams/linear.hpp"
#include "model/weights.hpp"

namespace exa::model {

// Distillation's two sides (docs/architecture.md "Distillation") over
// this rank's vocabulary columns: `reduce_max` and `reduce_sum` complete a
// row max and the sums of exponentials over the ranks that hold the other
// columns (no-ops when one rank holds them all).
namespace distill {

// The row max and sums of exp((logits - max) / tau) over the whole
// vocabulary; `terms`, when given, gets each exponential.
template <class T, class D, class Max, class Sum>
auto tempered_sums(const Kokkos::View<T**, Layout, D>& logits, double tau, const Kokkos::View<T**, Layout, D>& terms,
                   const Max& reduce_max, const Sum& reduce_sum) {
  const std::size_t n = logits.extent(0);
  Kokkos::View<T*, Layout, D> mx("exa::distill::row_max", n);
  Kokkos::View<double*, Layout, D> sums("exa::distill::sums", n);
  kernels::distill::row_max(logits, mx);
  reduce_max(mx);
  kernels::distill::exp_sums(logits, mx, tau, sums, terms);
  reduce_sum(sums);
  return std::make_pair(mx, sums);
}

// The teacher's soft targets of c.logits into `out` (sized like them).
template <class T, class D, class Max, class Sum>
void soft_targets(const StageContext<T, D>& c, double tau, const SoftTargets<T, D>& out, const Max& reduce_max,
                  const Sum& reduce_sum) {
  const auto [mx, sums] = tempered_sums(c.logits, tau, out.probs, reduce_max, reduce_sum);
  kernels::distill::normalise(c.logits, mx, sums, tau, out.probs, out.neg_entropy);
}

// The student's side: c.distill.lse, and this rank's part of the sum over
// the rows with a target of KL(teacher || softmax(c.logits / tau)).
template <class T, class D, class Max, class Sum>
double kl(StageContext<T, D>& c, const Max& reduce_max, const Sum& reduce_sum) {
  const auto [mx, sums] =
      tempered_sums(c.logits, c.distill.tau, Kokkos::View<T**, Layout, D>(), reduce_max, reduce_sum);
  kernels::distill::finish_lse(mx, sums, c.distill.tau, c.distill.lse);
  const auto& t = c.distill.teacher;
  return kernels::distill::kl_sum(c.logits, c.targets, c.distill.lse, t.probs, t.neg_entropy, c.distill.tau);
}

}  // namespace distill

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
  // The logits alone into c.logits (this rank's columns), from c.hf: a
  // distillation teacher's evaluation, which needs no cross-entropy.
  virtual void project(StageContext<T, D>& c, const W2& w, const Adapter& ad = {}) const = 0;
  // Distillation (docs/architecture.md "Distillation"), after forward() or
  // eval() filled c.logits. The teacher's side: softmax(logits / tau) over
  // the whole vocabulary into out (sized like the logits).
  virtual void soft_targets(const StageContext<T, D>& c, double tau, const SoftTargets<T, D>& out) const = 0;
  // The student's side: fills c.distill.lse and returns the sum, over the
  // rows with a target, of KL(c.distill.teacher || softmax(logits / tau)).
  // backward() then adds the gradient of coef tau^2 / n_valid times it.
  virtual double distill(StageContext<T, D>& c) const = 0;
  // Generation: logits [B,V] of the rows h [B,d].
  virtual void logits(const V2& h, const W2& w, const V2& out, const Adapter& ad = {}) const = 0;
};

}  // namespace exa::model
