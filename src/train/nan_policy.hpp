#pragma once
// What the Trainer does with a step whose loss or gradient norm is not
// finite (resilience.nan_policy, under resilience.nan_check):
//   abort     stop with a message naming the step (the default);
//   skip      drop the step (no update), log it and count it in the metrics;
//   rollback  like skip, but after resilience.nan_rollback_after consecutive
//             dropped steps reload the newest checkpoint and go on from it.
// A rollback that meets a bad step again at or before the last one it
// rolled back from stops the run: the fault repeats, it is not transient.
//
// Fault injection for the tests: EXAMOE_FAULT_NAN_AT_STEP=N makes the loss
// of the N-th step (1-based, as logged) NaN on world rank EXAMOE_FAULT_RANK
// (every rank when unset), once per process, so a step re-run after a
// rollback is clean, as after a transient fault.
#include <cstdint>
#include <string>

#include "core/deck/config.hpp"

namespace exa::train {

class NanGuard {
 public:
  enum class Policy { abort, skip, rollback };
  enum class Action { none, skip, rollback };

  explicit NanGuard(const deck::Config& cfg);

  bool enabled() const { return enabled_; }
  Policy policy() const { return policy_; }
  // True when a non-finite loss must not reach the optimizer (skip, rollback).
  bool drops_steps() const { return enabled_ && policy_ != Policy::abort; }

  // After step `step` (1-based) with the reduced loss and gradient norm
  // (the same on every rank): none for a finite step; otherwise exa::Error
  // (abort, or a repeated fault under rollback), or skip / rollback, with a
  // log line.
  Action after_step(std::int64_t step, double loss, double grad_norm);
  // The Trainer reloaded the checkpoint of step `to` after the bad step `from`.
  void rolled_back(std::int64_t from, std::int64_t to);

  std::int64_t nonfinite_steps() const { return nonfinite_; }  // so far in this process
  std::int64_t rollbacks() const { return rollbacks_; }

  // `loss`, or NaN when fault injection targets this step and rank.
  double inject(std::int64_t step, int world_rank, double loss);

 private:
  bool enabled_ = true;
  Policy policy_ = Policy::abort;
  std::int64_t rollback_after_ = 1;
  std::int64_t consecutive_ = 0, nonfinite_ = 0, rollbacks_ = 0;
  std::int64_t last_rollback_from_ = -1;
  bool injected_ = false;
};

}  // namespace exa::train
