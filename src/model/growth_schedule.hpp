#pragma once
// Expert growth's schedule (the deck's [growth]; docs/architecture.md
// "Expert growth"): after every `every` steps each MoE layer gains `add`
// experts, up to `max_experts`. The expert count is a pure function of the
// steps done, so a run resumed at any step builds the model of that step.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace exa::deck {
class Config;
}

namespace exa::model {

enum class GrowthInit { split, copy, random };

struct GrowthSchedule {
  std::int64_t every = 0;  // 0: no growth
  std::int64_t add = 0, start = 0, max = 0;  // start: moe.n_experts
  GrowthInit init = GrowthInit::split;
  double noise = 0;

  static GrowthSchedule from_deck(const deck::Config& cfg);
  bool enabled() const { return every > 0 && max > start; }
  // Experts per MoE layer after `steps_done` steps.
  std::int64_t experts_after(std::int64_t steps_done) const;
  // Whether the layers grow right after step `steps_done` (1-based).
  bool grows_after(std::int64_t steps_done) const {
    return enabled() && steps_done > 0 && experts_after(steps_done) > experts_after(steps_done - 1);
  }
  // Every expert count the schedule passes through, start first.
  std::vector<std::int64_t> counts() const;
};

const char* to_string(GrowthInit init);

// The clone ring of one MoE layer (kernels/router.hpp, `ring`) from each
// expert's family (its ancestor in the first model): each member points at
// the next member of its family by id, the last back at the first. Empty
// when no family has two members.
std::vector<int> clone_ring(const std::vector<std::int64_t>& family);
// The checkpoint state that holds the families: [MoE layers, E].
inline constexpr const char* kGrowthFamilyState = "growth_family";

// The deck's model after `steps_done` steps: moe.n_experts as the growth
// schedule has made it (what a checkpoint of that step holds).
ModelConfig model_config_at(const deck::Config& cfg, std::int64_t steps_done);

}  // namespace exa::model
