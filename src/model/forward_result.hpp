#pragma once
// What a forward pass reports: the loss and its parts, and the routing
// statistics of every MoE layer it ran.
#include <cstdint>
#include <vector>

namespace exa::model {

struct LossParts {
  double loss = 0;  // ce + aux + z + distill
  double ce = 0;    // mean cross-entropy over the valid targets
  double aux = 0;   // load-balancing loss, aux_coef included, summed over MoE layers
  double z = 0;     // router z-loss, z_coef included, summed over MoE layers
  double distill = 0;  // coef * tau^2 * mean KL from a teacher (expert growth's distillation), else 0
};

// Routing statistics of one MoE layer on one micro-batch.
struct LayerRouting {
  std::int64_t layer = 0;
  std::vector<std::int64_t> routed;  // [E] assignments per expert before capacity dropping
  std::vector<std::int64_t> kept;    // [E] assignments per expert after dropping
  std::int64_t dropped = 0;          // tokens*k - sum(kept)
  // max_e routed_e / mean_e routed_e (1 = perfectly balanced).
  double imbalance() const;
};

struct ForwardResult {
  LossParts loss;
  std::int64_t n_tokens = 0;  // B*T
  std::int64_t n_valid = 0;   // targets >= 0 (the CE mean's denominator)
  double ce_sum = 0;          // the cross-entropy summed over those targets (the head's stage)
  int task = 0;               // the micro-batch's task (data stream), as its input said
  std::vector<LayerRouting> routing;  // one per MoE layer, in layer order
  // Largest per-layer imbalance (1 when there are no MoE layers).
  double max_imbalance() const;
  // Mean over MoE layers of the per-layer imbalance (1 when none).
  double mean_imbalance() const;
};

}  // namespace exa::model
