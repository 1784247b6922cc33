#include "train/aux_free.hpp"

#include <fmt/ranges.h>

#include "core/deck/deck_checks.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::train {

AuxFreeBalancing::AuxFreeBalancing(const deck::Config& cfg, const model::ModelConfig& mcfg) {
  if (cfg.get_string("moe.router_bias") != "aux_free") return;
  rate_ = cfg.get_float("moe.bias_rate");  // > 0: the deck's checks refuse aux_free without a rate
  bias_.emplace(mcfg);
  const auto init = deck::number_list(cfg.get_string("moe.bias_init"));  // checked by the deck
  auto v = bias_->values();
  const auto E = static_cast<std::size_t>(bias_->n_experts());
  for (std::size_t l = 0; l < bias_->layers().size(); ++l)
    for (std::size_t e = 0; e < init.size() && e < E; ++e) v[l * E + e] = static_cast<float>(init[e]);
  bias_->set_values(std::move(v));
}

void AuxFreeBalancing::attach(model::StageModel<float>& m) const {
  if (bias_) bias_->apply(m);
}

void AuxFreeBalancing::after_step(const parallel::expert::MoeLoad& load, bool step_applied, model::StageModel<float>& m) {
  if (!bias_ || !step_applied) return;
  for (const auto& l : load.layers()) bias_->update(l.layer, l.kept, rate_);
  bias_->apply(m);
}

void AuxFreeBalancing::save(io::CheckpointMeta& meta) const {
  if (bias_) meta.state[model::kRouterBiasState] = io::StateArray{bias_->shape(), bias_->values()};
}

void AuxFreeBalancing::restore(const io::CheckpointMeta& meta, model::StageModel<float>& m) {
  const auto it = meta.state.find(model::kRouterBiasState);
  if (!bias_) {
    if (it != meta.state.end())
      log::warn("checkpoint {} holds router biases (trained with moe.router_bias = \"aux_free\"), but this run has "
                "moe.router_bias = \"none\": routing without them",
                meta.directory);
    return;
  }
  if (it == meta.state.end()) {
    log::warn("checkpoint {} holds no router biases (written with moe.router_bias = \"none\"): aux-loss-free "
              "balancing starts from zero biases",
              meta.directory);
    *bias_ = model::RouterBias(m.config());
  } else {
    EXA_REQUIRE(it->second.shape == bias_->shape(),
                "checkpoint {}: /state/router_bias has shape [{}] but this model's is [{}, {}] (MoE layers x "
                "experts); resume with the deck the checkpoint was written with",
                meta.directory, fmt::join(it->second.shape, ", "), bias_->shape()[0], bias_->shape()[1]);
    bias_->set_values(it->second.values);
  }
  bias_->apply(m);
}

}  // namespace exa::train
