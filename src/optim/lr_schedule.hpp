#pragma once
// Learning-rate schedule: linear warmup, then cosine or linear decay to a
// floor, or constant. A pure function of the step, so a restarted run needs
// nothing but the step number to resume it.
//
// `s` is the 0-based index of the optimizer step about to be taken (the
// first update is s = 0) and t = s + 1 counts the updates including this
// one. With lr = optim.lr, min_lr = optim.min_lr, W = optim.warmup_steps and
// T = train.steps:
//
//   warmup    t <= W   lr(s) = lr * t / W         lr/W at s = 0 ... lr at s = W-1
//   constant  t >  W   lr(s) = lr                 (min_lr is not used)
//   end       t >= T   lr(s) = min_lr             the last step, s = T-1, runs at min_lr
//   decay     W < t < T,  p = (t - W) / (T - W)   in (0, 1)
//     cosine           lr(s) = min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2
//     linear           lr(s) = lr - (lr - min_lr) * p
//
// This is Megatron-LM's OptimizerParamScheduler (its 1-based num_steps is t):
// the warmup ramp is the line from 0 at t = 0, so no update is spent at
// lr = 0; the peak is reached exactly at the last warmup step and the floor
// exactly at the last step; the curve is continuous at both joints. As a
// torch.optim.lr_scheduler.LambdaLR (whose counter is s): lambda s: lr(s)/lr.
// Steps past T (a run extended beyond train.steps) stay at min_lr. W >= T
// makes the whole run warmup.
#include <cstdint>
#include <string>

namespace exa::deck {
class Config;
}

namespace exa::optim {

enum class Decay { Cosine, Linear, Constant };

// "cosine" | "linear" | "constant"; exa::Error naming the choices otherwise.
Decay parse_decay(const std::string& name);
const char* decay_name(Decay d);

class LrSchedule {
 public:
  // exa::Error unless lr > 0, 0 <= min_lr <= lr, warmup_steps >= 0, total_steps >= 0.
  LrSchedule(double lr, double min_lr, std::int64_t warmup_steps, std::int64_t total_steps, Decay decay);
  // optim.lr, optim.min_lr, optim.warmup_steps, optim.schedule, train.steps.
  static LrSchedule from_deck(const deck::Config& cfg);

  // Learning rate of 0-based step s (s >= 0).
  double at(std::int64_t s) const;
  double operator()(std::int64_t s) const { return at(s); }

  double lr() const { return lr_; }
  double min_lr() const { return min_lr_; }
  std::int64_t warmup_steps() const { return warmup_; }
  std::int64_t total_steps() const { return total_; }
  Decay decay() const { return decay_; }
  // One line for logs and the checkpoint's "LR schedule state" attribute:
  // "cosine lr=0.0003 min_lr=3e-05 warmup_steps=100 total_steps=1000".
  std::string describe() const;

 private:
  double lr_, min_lr_;
  std::int64_t warmup_, total_;
  Decay decay_;
};

}  // namespace exa::optim
