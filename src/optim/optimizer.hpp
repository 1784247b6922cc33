#pragma once
// The optimizer as the trainer drives it: schedule, accumulation scaling,
// clipping and AdamW behind one call per step.
//
//   optim::Optimizer opt(store, cfg);                 // from the deck
//   opt.clipper().set_reduction(allreduce_sum);       // distributed layer, optional
//   for (s = 0; s < steps; ++s) {
//     store.zero_grads();
//     for (j = 0; j < opt.accumulation().micro_batches; ++j)
//       loss_sum += model.forward_backward(store, batch(s, j), opt.accumulation().backward_seed());
//     auto r = opt.step(store, s);                    // clip + AdamW at lr(s)
//     if (!r.applied) optim::require_finite(r.clip, s);  // or skip the step
//   }
//
// See grad_accum.hpp for the gradient-scaling contract, grad_clip.hpp for the
// norm and lr_schedule.hpp for the schedule's exact formula.
#include <cstdint>

#include "optim/adamw.hpp"
#include "optim/grad_accum.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"

namespace exa::optim {

struct StepReport {
  std::int64_t step = 0;  // 0-based schedule step
  double lr = 0.0;        // learning rate used (or that would have been)
  ClipResult clip;        // norm (logged), clip coefficient, scale
  bool applied = false;   // false when the gradient was not finite
  bool finite() const { return clip.finite; }
};

class Optimizer {
 public:
  Optimizer(const model::ParameterStore& store, const deck::Config& cfg);
  Optimizer(const model::ParameterStore& store, LrSchedule schedule, GradClipper clipper, GradAccumulation accum,
            AdamWConfig adamw);

  // After the step's micro-batch backwards have accumulated into
  // store.grads() (and any data-parallel sync): the global norm, then, if it
  // is finite, one AdamW update at lr = schedule(step) with grad_scale =
  // unscale * clip_coef. A non-finite norm changes nothing (no update, no
  // step count) and comes back with applied = false.
  StepReport step(model::ParameterStore& store, std::int64_t step);

  const LrSchedule& schedule() const { return schedule_; }
  GradClipper& clipper() { return clipper_; }
  const GradClipper& clipper() const { return clipper_; }
  const GradAccumulation& accumulation() const { return accum_; }
  // The loss scale S of the steps from now on (dynamic loss scaling).
  void set_loss_scale(double s) { accum_.loss_scale = s; }
  AdamW& adamw() { return adamw_; }
  const AdamW& adamw() const { return adamw_; }
  std::size_t bytes() const { return adamw_.bytes(); }

 private:
  LrSchedule schedule_;
  GradClipper clipper_;
  GradAccumulation accum_;
  AdamW adamw_;
};

}  // namespace exa::optim
