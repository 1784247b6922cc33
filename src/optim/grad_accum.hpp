#pragma once
// Gradient accumulation and static loss scaling: the one place that says how
// the gradient buffer relates to the gradient of the step's loss.
//
// The contract, for a step of n = train.grad_accum micro-batches with
// loss scale S = precision.loss_scale:
//
//   1. store.zero_grads() once, before the first micro-batch.
//   2. Micro-batch j's loss L_j is its mean cross-entropy (plus aux and z
//      losses). Its backward is seeded with dLoss = S (the gradient of the
//      scaled loss S*L_j) and ADDS S * dL_j/dθ into store.grads().
//   3. The data-parallel sync, when there is one, AVERAGES the buffers over
//      the replicas, which leaves the relation below intact.
//
// After the n micro-batches the buffer holds
//
//   grads = S * Σ_j dL_j/dθ = (n * S) * dL/dθ,   L = (1/n) Σ_j L_j,
//
// and L, the mean of the micro-batch means, is the mean loss over every
// target token of the step because every micro-batch has the same number
// (micro_batch * seq_len) of target tokens. The true gradient is therefore
// grads * unscale() with unscale() = 1 / (n * S).
//
// Nothing rescales the buffer in place: the factor is folded into the
// gradient norm (norm = ||grads|| * unscale, GradClipper::compute) and into
// AdamW's grad_scale (= unscale * clip_coef), so the buffer is read once
// by the norm and once by the update. The reported step loss is the mean of
// the micro-batch losses (step_loss()).
//
// With n = 2 and S = 1: micro-batch gradients g1, g2 give the update of one
// micro-batch whose gradient is (g1 + g2) / 2 (tests/optim check this).
#include <cstdint>

namespace exa::deck {
class Config;
}

namespace exa::optim {

struct GradAccumulation {
  std::int64_t micro_batches = 1;  // n = train.grad_accum
  double loss_scale = 1.0;         // S = precision.loss_scale

  // train.grad_accum, precision.loss_scale.
  static GradAccumulation from_deck(const deck::Config& cfg);

  // The gradient each micro-batch's backward starts from, d(S*L_j)/dL_j.
  double backward_seed() const { return loss_scale; }
  // Factor turning the accumulated buffer into the gradient of the step's loss.
  double unscale() const { return 1.0 / (static_cast<double>(micro_batches) * loss_scale); }
  // The step's loss from the sum of its micro-batch losses (unscaled).
  double step_loss(double sum_of_micro_losses) const {
    return sum_of_micro_losses / static_cast<double>(micro_batches);
  }
};

}  // namespace exa::optim
