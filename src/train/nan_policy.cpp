#include "train/nan_policy.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::train {

NanGuard::NanGuard(const deck::Config& cfg)
    : enabled_(cfg.get_bool("resilience.nan_check")),
      rollback_after_(cfg.get_int("resilience.nan_rollback_after")) {
  const std::string p = cfg.get_string("resilience.nan_policy");
  policy_ = p == "skip" ? Policy::skip : p == "rollback" ? Policy::rollback : Policy::abort;
}

NanGuard::Action NanGuard::after_step(std::int64_t step, double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    consecutive_ = 0;
    return Action::none;
  }
  if (!enabled_) return Action::none;  // nan_check = false: the optimizer alone drops a non-finite gradient
  const std::string what = fmt::format("step {}: the loss is {} and the gradient norm {}", step, loss, grad_norm);
  EXA_REQUIRE(policy_ != Policy::abort,
              "{}; the update was not applied. Lower optim.lr, raise optim.warmup_steps or set optim.grad_clip and "
              "restart from the last checkpoint, or set resilience.nan_policy = \"skip\" or \"rollback\" to go on",
              what);
  ++nonfinite_;
  ++consecutive_;
  if (policy_ == Policy::rollback && consecutive_ >= rollback_after_) {
    EXA_REQUIRE(step > last_rollback_from_,
                "{} again after rolling back from step {}: the fault repeats, so a rollback will not clear it. "
                "Lower optim.lr or raise optim.warmup_steps and restart from an older checkpoint",
                what, last_rollback_from_);
    log::warn("{}: rolling back to the newest checkpoint (resilience.nan_policy = \"rollback\", {} consecutive "
              "non-finite step{})",
              what, consecutive_, consecutive_ == 1 ? "" : "s");
    return Action::rollback;
  }
  log::warn("{}: step dropped, no update (resilience.nan_policy = \"{}\"; {} non-finite step{} so far)", what,
            policy_ == Policy::skip ? "skip" : "rollback", nonfinite_, nonfinite_ == 1 ? "" : "s");
  return Action::skip;
}

void NanGuard::rolled_back(std::int64_t from, std::int64_t to) {
  last_rollback_from_ = from;
  consecutive_ = 0;
  ++rollbacks_;
  log::warn("resilience: rolled back from step {} to the checkpoint of step {} (rollback {})", from, to, rollbacks_);
}

double NanGuard::inject(std::int64_t step, int world_rank, double loss) {
  static const char* when = std::getenv("EXAMOE_FAULT_NAN_AT_STEP");
  static const char* who = std::getenv("EXAMOE_FAULT_RANK");
  if (injected_ || when == nullptr || std::atoll(when) != step) return loss;
  if (who != nullptr && std::atoi(who) != world_rank) return loss;
  injected_ = true;
  log::warn("EXAMOE_FAULT_NAN_AT_STEP={}: rank {} makes the loss of step {} NaN (fault injection)", when, world_rank,
            step);
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace exa::train
