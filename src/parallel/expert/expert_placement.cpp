#include "parallel/expert/expert_placement.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace exa::parallel::expert {

namespace {

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

ExpertPlacement::ExpertPlacement(int n_experts, int ranks) : n_experts_(n_experts), ranks_(ranks) {
  EXA_REQUIRE(ranks >= 1 && n_experts >= 1 && n_experts % ranks == 0,
              "ExpertPlacement: {} experts do not split evenly over {} expert-parallel ranks", n_experts, ranks);
}

std::vector<int> ExpertPlacement::expert_at(std::int64_t layer) const {
  const auto it = expert_at_.find(layer);
  return it == expert_at_.end() ? identity(n_experts_) : it->second;
}

std::vector<int> ExpertPlacement::slot_of(std::int64_t layer) const {
  const auto at = expert_at(layer);
  std::vector<int> slot(at.size());
  for (std::size_t p = 0; p < at.size(); ++p) slot[std::size_t(at[p])] = int(p);
  return slot;
}

std::vector<std::int64_t> ExpertPlacement::moved_layers() const {
  std::vector<std::int64_t> l;
  for (const auto& [layer, at] : expert_at_) l.push_back(layer);
  return l;
}

void ExpertPlacement::set(std::int64_t layer, const std::vector<int>& expert_at) {
  EXA_REQUIRE(std::int64_t(expert_at.size()) == n_experts_,
              "ExpertPlacement: layer {} placement names {} experts, the model has {}", layer, expert_at.size(),
              n_experts_);
  std::vector<char> seen(expert_at.size(), 0);
  for (const int e : expert_at) {
    EXA_REQUIRE(e >= 0 && e < n_experts_ && !seen[std::size_t(e)],
                "ExpertPlacement: layer {} placement is not a permutation of the {} experts (expert {})", layer,
                n_experts_, e);
    seen[std::size_t(e)] = 1;
  }
  if (expert_at == identity(n_experts_))
    expert_at_.erase(layer);
  else
    expert_at_[layer] = expert_at;
  ++version_;
}

std::vector<std::int64_t> ExpertPlacement::rank_tokens(std::int64_t layer,
                                                       const std::vector<std::int64_t>& kept) const {
  EXA_REQUIRE(std::int64_t(kept.size()) == n_experts_, "ExpertPlacement: {} expert loads for {} experts",
              kept.size(), n_experts_);
  const auto slot = slot_of(layer);
  std::vector<std::int64_t> r(static_cast<std::size_t>(ranks_), 0);
  for (std::size_t e = 0; e < kept.size(); ++e) r[std::size_t(slot[e] / slots())] += kept[e];
  return r;
}

std::vector<int> balanced_placement(const std::vector<std::int64_t>& load, const std::vector<int>& current,
                                    int ranks) {
  const int E = int(load.size());
  EXA_REQUIRE(ranks >= 1 && E % ranks == 0 && int(current.size()) == E,
              "balanced_placement: {} experts over {} ranks ({} in the current placement)", E, ranks,
              current.size());
  const int S = E / ranks;
  std::vector<int> order = identity(E);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return load[std::size_t(a)] > load[std::size_t(b)]; });
  std::vector<std::int64_t> sum(std::size_t(ranks), 0);
  std::vector<int> count(std::size_t(ranks), 0), rank_of(std::size_t(E), 0);
  for (const int e : order) {
    int best = -1;
    for (int r = 0; r < ranks; ++r)
      if (count[std::size_t(r)] < S && (best < 0 || sum[std::size_t(r)] < sum[std::size_t(best)])) best = r;
    rank_of[std::size_t(e)] = best;
    sum[std::size_t(best)] += load[std::size_t(e)];
    ++count[std::size_t(best)];
  }
  // Slots: experts staying on their rank keep theirs, the others fill the
  // rank's free slots in expert order.
  std::vector<int> at(std::size_t(E), -1), old_slot(std::size_t(E), 0);
  for (int p = 0; p < E; ++p) old_slot[std::size_t(current[std::size_t(p)])] = p;
  for (int e = 0; e < E; ++e)
    if (old_slot[std::size_t(e)] / S == rank_of[std::size_t(e)]) at[std::size_t(old_slot[std::size_t(e)])] = e;
  for (int e = 0; e < E; ++e) {
    if (old_slot[std::size_t(e)] / S == rank_of[std::size_t(e)]) continue;
    const int r = rank_of[std::size_t(e)];
    for (int p = r * S; p < (r + 1) * S; ++p)
      if (at[std::size_t(p)] < 0) {
        at[std::size_t(p)] = e;
        break;
      }
  }
  return at;
}

}  // namespace exa::parallel::expert
