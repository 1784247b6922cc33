#pragma once
// `examoe-plan reliability`: the checkpoint interval that wastes least and
// the share of wall time left for training, per checkpoint tier, from the
// node MTBF, the node count and the measured cost of a checkpoint and of a
// restart (Young 1974, Daly 2006: first order).
#include <string>
#include <vector>

namespace exa::plan {

struct TierCost {
  std::string name;       // "memory (tier 0)", "local (tier 1)", "shared (tier 2)"
  double checkpoint_s = 0;  // time a step loses to one checkpoint
  double restart_s = 0;     // detection, relaunch and reload (the work since the checkpoint is tau/2)
};

struct TierPlan {
  TierCost tier;
  double interval_s = 0;    // sqrt(2 C M)
  double efficiency = 0;    // 1 - C/tau - (R + tau/2) / M
};

struct ReliabilityPlan {
  double system_mtbf_s = 0;
  std::vector<TierPlan> tiers;
  int best = 0;
};

// `interval_s` > 0 evaluates every tier at that interval instead of its
// optimum (to compare with a run that checkpoints at a set cadence).
ReliabilityPlan plan_reliability(double node_mtbf_hours, int nodes, const std::vector<TierCost>& tiers,
                                 double interval_s = 0);

}  // namespace exa::plan
