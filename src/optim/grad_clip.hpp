#pragma once
// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_:
//
//   norm      = || gradient of the step's loss ||_2 over every parameter of the model
//   clip_coef = min(1, max_norm / (norm + 1e-6))       (1 when max_norm = 0: no clipping)
//
// The gradient is never rewritten: the caller passes
// ClipResult::grad_scale = unscale * clip_coef to AdamW, which multiplies
// the gradient by it as it reads it (kernels/adamw.hpp). `unscale` is
// GradAccumulation::unscale(), the factor from the accumulated buffer to the
// true gradient (grad_accum.hpp).
//
// Distributed: this rank computes the squared norm of its own gradient slice
// (store.grads()) in double, then calls the reduction hook, which the
// parallel layer sets to an MPI allreduce (sum) over the ranks whose slices
// together cover every parameter once (identity by default: one rank). The
// hook must make each element count once: ranks holding replicas of the same
// slice must not all contribute it.
//
// The norm is always computed (it is logged), clipping or not. A non-finite
// norm (inf/nan anywhere in the gradient) is reported with finite = false and
// grad_scale = 0: the step must not be applied; the trainer skips it or stops
// (require_finite gives the message naming the step).
#include <cstdint>

#include "core/reduction.hpp"
#include "model/parameter_store.hpp"

namespace exa::deck {
class Config;
}

namespace exa::optim {

struct ClipResult {
  double norm = 0.0;        // global L2 norm of the (unscaled) gradient, before clipping
  double clip_coef = 1.0;   // min(1, max_norm / (norm + 1e-6)); 1 without clipping
  double grad_scale = 1.0;  // unscale * clip_coef: AdamWHyper::grad_scale; 0 when !finite
  bool finite = true;       // false: inf/nan in the gradient, do not apply the step
  bool clipped() const { return clip_coef < 1.0; }
};

class GradClipper {
 public:
  // max_norm = 0: no clipping (the norm is still computed). Empty reduce = identity.
  explicit GradClipper(double max_norm = 0.0, Reduction reduce = {});
  // optim.grad_clip.
  static GradClipper from_deck(const deck::Config& cfg);

  // The distributed layer installs its allreduce here; {} restores identity.
  void set_reduction(Reduction reduce);
  double max_norm() const { return max_norm_; }

  // Squared L2 norm of this rank's gradient slice, in double, unreduced.
  static double local_sq_norm(const model::ParameterStore& store);

  // Reduce this rank's squared norm, then norm, clip coefficient and scale.
  ClipResult compute(const model::ParameterStore& store, double unscale = 1.0) const;
  // The same from an already computed local squared norm of the buffer.
  ClipResult from_sq_norm(double local_sq_norm, double unscale = 1.0) const;

 private:
  double max_norm_;
  Reduction reduce_;
};

// exa::Error "step N: the gradient norm is nan ..." when !r.finite (the
// trainer's stop under resilience.nan_check). `step` is the step number as
// the trainer logs it.
void require_finite(const ClipResult& r, std::int64_t step);

}  // namespace exa::optim
