#pragma once
// RoutingScope: over which tokens a MoE layer takes the statistics of its
// load-balancing loss, aux = aux_coef · E · Σ_e f_e P_e (docs/architecture.md,
// "Context parallelism"). By default they are this rank's micro-batch. Under
// context parallelism a micro-batch's sequences are spread over the cp ranks
// of the Cp group; with moe.aux_scope = "sequence" the per-expert counts and
// probability sums are summed over them, so that the aux loss (and its
// gradient) is the one a single rank computes for the whole micro-batch.
//
// With moe.capacity_scope = "sequence" the capacity is that of the whole
// micro-batch, and an assignment is kept when fewer than that many
// assignments to its expert precede it in the sequences' token order, over
// every rank's rows (zigzag: rank r holds chunks r and 2cp - 1 - r of each
// sequence): the tokens one rank would drop.
#include <cstdint>
#include <functional>
#include <vector>

namespace exa::model {

struct RoutingScope {
  int ranks = 1;  // ranks whose tokens make up each micro-batch's sequences
  // Sums a host vector elementwise over those ranks, in place; empty: the
  // statistics stay this rank's own.
  std::function<void(std::vector<double>&)> sum;
  bool aux = false;       // moe.aux_scope = "sequence"
  bool capacity = false;  // moe.capacity_scope = "sequence"
  int rank = 0;           // this rank's index among them (its zigzag chunks)
  std::int64_t rows_per_sequence = 0;  // its rows of each sequence (T / cp)
  bool spans_ranks() const { return aux && static_cast<bool>(sum); }
  bool capacity_spans() const { return capacity && static_cast<bool>(sum); }
};

}  // namespace exa::model
