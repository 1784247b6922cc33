#pragma once
// Aux-loss-free load balancing in the training loop (moe.router_bias =
// "aux_free", moe.bias_rate; the rule is model/router_bias.hpp's). After
// each applied optimizer step the biases move by bias_rate against the
// step's expert loads (parallel::expert::MoeLoad, already summed over the data group, so every
// rank computes the same biases) and the model routes with them from the
// next forward on. They are saved in every checkpoint as
// /state/router_bias and restored on resume. A checkpoint without them
// (written with router_bias = "none") resumes with zero biases and a
// warning; one with them resumed with router_bias = "none" routes without
// them, also with a warning. A skipped step (non-finite gradients) leaves
// them as they were, like the parameters.
#include <optional>

#include "core/deck/config.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/router_bias.hpp"
#include "model/stage_model.hpp"
#include "parallel/expert/moe_load.hpp"

namespace exa::train {

class AuxFreeBalancing {
 public:
  // Off unless the deck says moe.router_bias = "aux_free".
  AuxFreeBalancing(const deck::Config& cfg, const model::ModelConfig& mcfg);

  bool enabled() const { return bias_.has_value(); }
  double rate() const { return rate_; }
  // The biases (null when off).
  const model::RouterBias* bias() const { return bias_ ? &*bias_ : nullptr; }

  // Hands the starting biases (zero, or moe.bias_init's) to `m`.
  void attach(model::StageModel<float>& m) const;
  // Updates the biases from the step's loads and hands them to `m`.
  void after_step(const parallel::expert::MoeLoad& load, bool step_applied, model::StageModel<float>& m);
  // Adds /state/router_bias to `meta` (nothing when off).
  void save(io::CheckpointMeta& meta) const;
  // Takes the biases from a loaded checkpoint's state and hands them to `m`.
  void restore(const io::CheckpointMeta& meta, model::StageModel<float>& m);

 private:
  std::optional<model::RouterBias> bias_;
  double rate_ = 0;
};

}  // namespace exa::train
