#pragma once
// RoutingScope: over which tokens a MoE layer takes the statistics of its
// load-balancing loss, aux = aux_coef · E · Σ_e f_e P_e (docs/architecture.md,
// "Context parallelism"). By default they are this rank's micro-batch. Under
// context parallelism a micro-batch's sequences are spread over the cp ranks
// of the Cp group; with moe.aux_scope = "sequence" the per-expert counts and
// probability sums are summed over them, so that the aux loss (and its
// gradient) is the one a single rank computes for the whole micro-batch.
#include <functional>
#include <vector>

namespace exa::model {

struct RoutingScope {
  int ranks = 1;  // ranks whose tokens make up each micro-batch's sequences
  // Sums a host vector elementwise over those ranks, in place; empty: the
  // statistics stay this rank's own.
  std::function<void(std::vector<double>&)> sum;
  bool spans_ranks() const { return static_cast<bool>(sum); }
};

}  // namespace exa::model
