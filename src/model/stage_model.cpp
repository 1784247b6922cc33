#include "model/stage_model.hpp"

#include "model/stage_model_impl.hpp"

#include <string>

#include "core/deck/config.hpp"

namespace exa::model {

ModelOptions ModelOptions::from_deck(const deck::Config& cfg) {
  ModelOptions o;
  const std::string recompute = cfg.get_string("memory.recompute");
  o.recompute = recompute == "full" ? Recompute::full : recompute == "selective" ? Recompute::selective : Recompute::none;
  const std::string layers = cfg.get_string("memory.checkpoint_layers");
  // The deck checks made sure it is "all", "sqrt" or a positive integer.
  o.checkpoint_layers = layers == "all" ? 1 : layers == "sqrt" ? kSqrtLayers : std::stoll(layers);
  return o;
}

template class StageModel<float, Device>;
template class StageModel<double, Device>;

}  // namespace exa::model
