#include "plan/reliability.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace exa::plan {

ReliabilityPlan plan_reliability(double node_mtbf_hours, int nodes, const std::vector<TierCost>& tiers,
                                 double interval_s) {
  EXA_REQUIRE(node_mtbf_hours > 0 && nodes >= 1, "reliability: the node MTBF (hours) and the node count must be "
              "positive, not {} and {}", node_mtbf_hours, nodes);
  ReliabilityPlan p;
  p.system_mtbf_s = node_mtbf_hours * 3600.0 / nodes;
  const double M = p.system_mtbf_s;
  for (const auto& t : tiers) {
    EXA_REQUIRE(t.checkpoint_s > 0 && t.restart_s >= 0, "reliability: tier '{}' needs a checkpoint cost > 0 and a "
                "restart cost >= 0", t.name);
    TierPlan tp{t, interval_s > 0 ? interval_s : std::sqrt(2 * t.checkpoint_s * M), 0};
    tp.efficiency = std::max(0.0, 1 - t.checkpoint_s / tp.interval_s - (t.restart_s + tp.interval_s / 2) / M);
    p.tiers.push_back(tp);
  }
  for (std::size_t i = 1; i < p.tiers.size(); ++i)
    if (p.tiers[i].efficiency > p.tiers[std::size_t(p.best)].efficiency) p.best = int(i);
  return p;
}

}  // namespace exa::plan
