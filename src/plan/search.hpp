#pragma once
// The planner's search (docs/planner.md): every layout of `world` ranks
// (dp, zero 0-3, ep, etp, tp with or without sp, pp with each schedule and
// virtual stages, cp with each mode) and every recompute, precision and
// compression policy asked for, pruned by the deck's divisibility rules and
// by the memory model, ranked by predicted step time. The top candidates
// are checked by loading the deck with their settings, so every plan it
// returns runs.
#include <cstdint>
#include <string>
#include <vector>

#include "core/deck/config.hpp"
#include "plan/candidate.hpp"
#include "plan/cluster.hpp"
#include "plan/cost_model.hpp"

namespace exa::plan {

struct SearchOptions {
  int world = 1;
  int top = 5;
  std::int64_t global_batch = 0;  // sequences per step; 0 = the deck's micro_batch * grad_accum * dp
  std::vector<std::string> precisions;    // empty: the deck's
  std::vector<std::string> compressions;  // gradient wire formats tried when data > 1; empty: the deck's
  std::vector<std::string> a2a_compressions;  // expert all-to-all wire formats tried when ep > 1; empty: the deck's
  std::vector<std::string> weight_compressions;  // ZeRO allgather wire formats tried with ZeRO >= 1; empty: the deck's
  bool vary_recompute = true;  // memory.recompute/checkpoint_layers, then expert offload (else the deck's)
  // Flat and hierarchical collectives (parallel.hierarchical,
  // comm.hierarchical_a2a, comm.compress_scope) where a group spans nodes
  // (else the deck's, where the layout allows them).
  bool vary_collectives = true;
  PredictOptions predict;
};

struct Ranked {
  Candidate candidate;
  StepCost cost;
};

struct SearchResult {
  std::vector<Ranked> top;         // fastest first, each one a deck that loads
  std::int64_t layouts = 0;        // grid shapes (tp, cp, pp, dp, ep, etp) that divide everything
  std::int64_t space = 0;          // candidates with every policy
  std::int64_t pruned_memory = 0;  // candidates that do not fit
  std::int64_t dominated = 0;      // slower than a fitting candidate of the same layout (more ZeRO or recompute)
  std::int64_t refused = 0;        // ranked candidates the deck's checks refused
  std::int64_t global_batch = 0;
  double seconds = 0;
  Ranked best_unfit;               // the smallest footprint that does not fit (memory total 0: none)
};

// `base` is the model deck as loaded for one rank (its own [parallel]
// reset); candidates are checked by Config::from_text with their overrides.
SearchResult search(const deck::Config& base, const Cluster& cluster, const SearchOptions& opt);

// The deck of a candidate for `world` ranks (exa::Error from the deck's
// checks when it does not load).
deck::Config candidate_config(const deck::Config& base, const Candidate& c, int world);

}  // namespace exa::plan
