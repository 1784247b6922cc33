#include "train/saved_routing.hpp"

#include "core/error.hpp"
#include "model/growth_schedule.hpp"
#include "model/router_bias.hpp"

namespace exa::train {

void route_as_saved(const io::CheckpointMeta& meta, model::StageModel<float>& m) {
  const auto& cfg = m.config();
  if (const auto it = meta.state.find(model::kRouterBiasState); it != meta.state.end()) {
    model::RouterBias bias(cfg);
    bias.set_values(it->second.values);
    bias.apply(m);
  }
  if (const auto it = meta.state.find(model::kGrowthFamilyState); it != meta.state.end()) {
    const auto& f = it->second;
    EXA_REQUIRE(f.shape.size() == 2 && f.shape[1] == cfg.n_experts, "checkpoint {}: /state/{} is not [MoE layers, {}]",
                meta.directory, model::kGrowthFamilyState, cfg.n_experts);
    std::size_t row = 0;
    const std::size_t E = std::size_t(f.shape[1]);
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      if (!cfg.is_moe_layer(l)) continue;
      std::vector<std::int64_t> fam(E);
      for (std::size_t e = 0; e < E; ++e) fam[e] = std::int64_t(f.values[row * E + e]);
      ++row;
      if (l >= m.plan().layer_begin && l < m.plan().layer_end) m.set_clone_ring(l, model::clone_ring(fam));
    }
  }
}

}  // namespace exa::train
