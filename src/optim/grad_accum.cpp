#include "optim/grad_accum.hpp"

#include "core/deck/config.hpp"
#include "core/error.hpp"

namespace exa::optim {

GradAccumulation GradAccumulation::from_deck(const deck::Config& c) {
  GradAccumulation g;
  g.micro_batches = c.get_int("train.grad_accum");
  g.loss_scale = c.get_float("precision.loss_scale");
  EXA_ASSERT(g.micro_batches >= 1 && g.loss_scale > 0.0);  // the deck's ranges guarantee it
  return g;
}

}  // namespace exa::optim
