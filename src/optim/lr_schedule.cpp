#include "optim/lr_schedule.hpp"

#include <cmath>

#include "core/deck/config.hpp"
#include "core/error.hpp"

namespace exa::optim {

Decay parse_decay(const std::string& name) {
  if (name == "cosine") return Decay::Cosine;
  if (name == "linear") return Decay::Linear;
  if (name == "constant") return Decay::Constant;
  throw Error(fmt::format("unknown LR schedule '{}': choose cosine, linear or constant", name));
}

const char* decay_name(Decay d) {
  switch (d) {
    case Decay::Cosine: return "cosine";
    case Decay::Linear: return "linear";
    case Decay::Constant: return "constant";
  }
  return "?";
}

LrSchedule::LrSchedule(double lr, double min_lr, std::int64_t warmup_steps, std::int64_t total_steps, Decay decay)
    : lr_(lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps), decay_(decay) {
  EXA_REQUIRE(lr > 0.0 && std::isfinite(lr), "LR schedule: lr must be a finite number > 0, got {}", lr);
  EXA_REQUIRE(min_lr >= 0.0 && min_lr <= lr, "LR schedule: min_lr must be in [0, lr = {}], got {}", lr, min_lr);
  EXA_REQUIRE(warmup_steps >= 0, "LR schedule: warmup_steps must be >= 0, got {}", warmup_steps);
  EXA_REQUIRE(total_steps >= 0, "LR schedule: total_steps must be >= 0, got {}", total_steps);
}

LrSchedule LrSchedule::from_deck(const deck::Config& c) {
  return LrSchedule(c.get_float("optim.lr"), c.get_float("optim.min_lr"), c.get_int("optim.warmup_steps"),
                    c.get_int("train.steps"), parse_decay(c.get_string("optim.schedule")));
}

double LrSchedule::at(std::int64_t s) const {
  EXA_REQUIRE(s >= 0, "LR schedule: step must be >= 0 (0-based), got {}", s);
  const std::int64_t t = s + 1;  // updates including this one
  if (t <= warmup_) return lr_ * static_cast<double>(t) / static_cast<double>(warmup_);
  if (decay_ == Decay::Constant) return lr_;
  if (t >= total_) return min_lr_;
  // W < t < T, so T - W >= 2 and p is in (0, 1).
  const double p = static_cast<double>(t - warmup_) / static_cast<double>(total_ - warmup_);
  if (decay_ == Decay::Linear) return lr_ - (lr_ - min_lr_) * p;
  constexpr double pi = 3.14159265358979323846;
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(pi * p));
}

std::string LrSchedule::describe() const {
  return fmt::format("{} lr={} min_lr={} warmup_steps={} total_steps={}", decay_name(decay_), lr_, min_lr_, warmup_,
                     total_);
}

}  // namespace exa::optim
