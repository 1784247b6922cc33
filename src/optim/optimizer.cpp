#include "optim/optimizer.hpp"

namespace exa::optim {

Optimizer::Optimizer(const model::ParameterStore& store, const deck::Config& cfg)
    : Optimizer(store, LrSchedule::from_deck(cfg), GradClipper::from_deck(cfg), GradAccumulation::from_deck(cfg),
                AdamWConfig::from_deck(cfg)) {}

Optimizer::Optimizer(const model::ParameterStore& store, LrSchedule schedule, GradClipper clipper,
                     GradAccumulation accum, AdamWConfig adamw)
    : schedule_(schedule), clipper_(std::move(clipper)), accum_(accum), adamw_(store, adamw) {}

StepReport Optimizer::step(model::ParameterStore& store, std::int64_t step) {
  StepReport r;
  r.step = step;
  r.lr = schedule_.at(step);
  r.clip = clipper_.compute(store, accum_.unscale());
  if (!r.clip.finite) return r;
  adamw_.step(store, r.lr, r.clip.grad_scale);
  r.applied = true;
  return r;
}

}  // namespace exa::optim
