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
#include "model/activation_context.hpp"
#include "model/seams/linear.hpp"
#include "model/weights.hpp"

namespace exa::model {

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
  // Generation: logits [B,V] of the rows h [B,d].
  virtual void logits(const V2& h, const W2& w, const V2& out, const Adapter& ad = {}) const = 0;
};

}  // namespace exa::model
