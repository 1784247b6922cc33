#pragma once
// Loss scaling (precision.loss_scaling): the factor S by which each
// micro-batch's backward is seeded (grad_accum.hpp), so that small
// gradients survive fp16's range, and the rule that moves it.
//
//   static   S = precision.loss_scale for the whole run.
//   dynamic  S starts at precision.loss_scale. A step whose loss is finite
//            but whose gradient is not (an fp16 overflow: some product's
//            input rounded to infinity) is skipped, no update, and S is
//            halved; after precision.loss_scale_window clean steps in a
//            row S is doubled. S stays a power of two times the start, so
//            scaling never rounds, and never drops below 1: an overflow at
//            S = 1 is no scaling problem, and it goes to
//            resilience.nan_policy like any non-finite step.
//
// The scale, the clean-step count and the number of skipped steps are part
// of the checkpoint (save/restore), so a resumed run repeats the scales.
#include <cstdint>
#include <string>
#include <vector>

#include "core/deck/config.hpp"

namespace exa::optim {

class LossScaler {
 public:
  LossScaler(bool dynamic, double initial, std::int64_t window);
  static LossScaler from_deck(const deck::Config& cfg);

  bool dynamic() const { return dynamic_; }
  double scale() const { return scale_; }
  std::int64_t overflow_skips() const { return skips_; }
  std::int64_t clean_steps() const { return clean_; }

  // After a step with a finite loss: `finite_grads` says whether its
  // gradient norm was finite. Returns true when the step was an overflow
  // this scaler takes care of (skip it; S halved); false otherwise (a clean
  // step, counted toward growth, or a non-finite one it cannot help).
  bool after_step(bool finite_grads);

  // The checkpoint's three numbers: scale, clean steps, overflow skips.
  static constexpr const char* kStateName = "loss_scaler";
  std::vector<float> state() const;
  // From a checkpoint's state (empty: a run without one, e.g. static or
  // fp32: the deck's start stands). Throws on a malformed state.
  void restore(const std::vector<float>& state);

 private:
  bool dynamic_;
  double scale_;
  std::int64_t window_, clean_ = 0, skips_ = 0;
};

}  // namespace exa::optim
