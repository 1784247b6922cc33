#include "train/checkpoint_tiers.hpp"

#include "io/checkpoint/checkpoint.hpp"
#include "train/deck_paths.hpp"

namespace exa::train {

std::vector<CheckpointTier> checkpoint_tiers(const deck::Config& cfg) {
  std::vector<CheckpointTier> t;
  if (cfg.get_int("checkpoint.local_every") > 0) t.push_back({1, deck_local_checkpoint_dir(cfg)});
  t.push_back({2, deck_checkpoint_dir(cfg)});
  return t;
}

std::optional<TieredCheckpoint> newest_checkpoint(const std::vector<CheckpointTier>& tiers,
                                                  std::optional<std::uint64_t> before) {
  std::optional<TieredCheckpoint> best;
  for (const auto& t : tiers) {  // fastest first: a step found again later is a copy
    for (const auto& [step, dir] : io::list_checkpoints(t.dir)) {
      if (before && step >= *before) continue;
      if (!best || step > best->step) best = TieredCheckpoint{step, t.tier, dir, {}};
    }
  }
  if (!best) return best;
  for (const auto& t : tiers) {
    if (t.tier == best->tier) continue;
    for (const auto& [step, dir] : io::list_checkpoints(t.dir))
      if (step == best->step) best->copies.push_back(dir);
  }
  return best;
}

}  // namespace exa::train
