#pragma once
// ExpertPlacement: which expert-parallel rank, and which of its slots,
// computes each routed expert of each MoE layer (docs/architecture.md,
// "Expert parallelism", re-placement). Physical slot p lives on rank
// p / slots() at local index p % slots(); the identity placement puts
// expert e in slot e, the contiguous ranges every layout starts with and
// every checkpoint is written in. Re-placement (moe.replace_every) permutes
// the experts over the slots to balance the measured loads; it changes who
// computes an expert, never what is computed, so the router keeps speaking
// of experts and only the dispatcher and the load metrics translate.
//
// Every rank holds the same placement: it is decided from loads summed over
// the data group, by a deterministic rule (balanced_placement).
#include <cstdint>
#include <map>
#include <vector>

namespace exa::parallel::expert {

class ExpertPlacement {
 public:
  // n_experts over `ranks` expert-parallel ranks (ranks divides n_experts).
  ExpertPlacement(int n_experts, int ranks);

  int n_experts() const { return n_experts_; }
  int ranks() const { return ranks_; }
  int slots() const { return n_experts_ / ranks_; }  // experts per rank

  bool is_identity(std::int64_t layer) const { return expert_at_.count(layer) == 0; }
  bool all_identity() const { return expert_at_.empty(); }
  // [E] the expert in each physical slot / the slot of each expert.
  std::vector<int> expert_at(std::int64_t layer) const;
  std::vector<int> slot_of(std::int64_t layer) const;
  // The layers whose placement is not the identity.
  std::vector<std::int64_t> moved_layers() const;
  // Sets one layer's placement (`expert_at` a permutation of [0, E);
  // exa::Error otherwise); the identity forgets the layer.
  void set(std::int64_t layer, const std::vector<int>& expert_at);
  // Bumped by every set(): the dispatcher re-uploads its tables on change.
  std::uint64_t version() const { return version_; }

  // Tokens each rank receives when expert e keeps kept[e] of them. [ranks]
  std::vector<std::int64_t> rank_tokens(std::int64_t layer, const std::vector<std::int64_t>& kept) const;

 private:
  int n_experts_, ranks_;
  std::map<std::int64_t, std::vector<int>> expert_at_;  // non-identity layers only
  std::uint64_t version_ = 0;
};

// A placement of `load.size()` experts over `ranks` ranks of equal slots
// that balances the summed loads: greedy longest-processing-time (heaviest
// expert first, to the least loaded rank with a free slot; ties to the lower
// rank, equal loads in expert order). An expert whose rank does not change
// keeps its slot in `current` (the placement it is moved from) when it can,
// so only the experts that change rank move. Returns expert_at.
// A heuristic with a guarantee: every rank ends within its own heaviest
// expert of every other rank, so the heaviest rank holds at most the mean
// plus (1 - 1/ranks) of the heaviest expert, within 2 - 1/ranks of the best
// placement (tests/parallel/test_expert_placement.cpp checks both).
std::vector<int> balanced_placement(const std::vector<std::int64_t>& load, const std::vector<int>& current,
                                    int ranks);

}  // namespace exa::parallel::expert
