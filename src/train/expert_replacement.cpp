#include "train/expert_replacement.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::train {

namespace {

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

int moved_experts(const std::vector<int>& from, const std::vector<int>& to) {
  int n = 0;
  for (std::size_t p = 0; p < from.size(); ++p) n += from[p] != to[p];
  return n;
}

}  // namespace

ExpertReplacement::ExpertReplacement(const deck::Config& cfg, const model::ModelConfig& mcfg, int ep) {
  every_ = cfg.get_int("moe.replace_every");
  threshold_ = cfg.get_float("moe.replace_threshold");
  if (every_ > 0) placement_ = std::make_shared<parallel::expert::ExpertPlacement>(int(mcfg.n_experts), ep);
}

std::vector<nlohmann::json> ExpertReplacement::after_step(const parallel::expert::MoeLoad& load, std::int64_t steps_done,
                                                          const Mover& move) {
  std::vector<nlohmann::json> records;
  if (!enabled()) return records;
  for (const auto& l : load.layers()) {
    auto& w = window_[l.layer];
    w.resize(l.kept.size(), 0);
    for (std::size_t e = 0; e < l.kept.size(); ++e) w[e] += l.kept[e];
  }
  ++window_steps_;
  if (steps_done % every_ != 0) return records;
  for (const auto& [layer, kept] : window_) {
    const auto before = parallel::expert::max_over_mean(placement_->rank_tokens(layer, kept));
    if (before <= threshold_) continue;
    const auto from = placement_->expert_at(layer);
    const auto to = parallel::expert::balanced_placement(kept, from, placement_->ranks());
    parallel::expert::ExpertPlacement trial = *placement_;
    trial.set(layer, to);
    const auto after = parallel::expert::max_over_mean(trial.rank_tokens(layer, kept));
    if (after >= before) continue;
    move({layer, from, to});
    placement_->set(layer, to);
    const int moved = moved_experts(from, to);
    log::info("expert re-placement: layer {} rank load max/mean {:.3f} -> {:.3f} over the last {} steps, {} of {} "
              "experts moved",
              layer, before, after, window_steps_, moved, to.size());
    records.push_back({{"layer", layer}, {"rank_imbalance_before", before}, {"rank_imbalance_after", after},
                       {"moved", moved}, {"placement", to}, {"window_steps", window_steps_}});
  }
  window_.clear();
  window_steps_ = 0;
  return records;
}

void ExpertReplacement::forget_placement() {
  window_.clear();
  window_steps_ = 0;
  if (!enabled()) return;
  const auto global = identity(placement_->n_experts());
  for (const auto l : placement_->moved_layers()) placement_->set(l, global);
}

// The state's layout: ep, the window's steps, then per layer of the
// placement or the window: the layer, E slots' experts, E kept counts.
// Counts are int64 and the checkpoint's state arrays float: each goes as
// two floats of 24 bits, exact below 2^48.
namespace {
void put_count(std::vector<float>& v, std::int64_t n) {
  v.push_back(float(n >> 24));
  v.push_back(float(n & 0xFFFFFF));
}
std::int64_t get_count(const float* p) { return (std::int64_t(p[0]) << 24) + std::int64_t(p[1]); }
}  // namespace

std::vector<float> ExpertReplacement::state(int ep) const {
  if (!enabled()) return {};
  std::vector<float> v{float(ep)};
  put_count(v, window_steps_);
  std::vector<std::int64_t> layers = placement_->moved_layers();
  for (const auto& [l, w] : window_) layers.push_back(l);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  const int E = placement_->n_experts();
  for (const auto l : layers) {
    v.push_back(float(l));
    for (const int e : placement_->expert_at(l)) v.push_back(float(e));
    const auto it = window_.find(l);
    for (int e = 0; e < E; ++e)
      put_count(v, it != window_.end() && std::size_t(e) < it->second.size() ? it->second[std::size_t(e)] : 0);
  }
  return v;
}

void ExpertReplacement::restore(const std::vector<float>* state, int ep, const Mover& move) {
  forget_placement();
  if (!enabled() || state == nullptr || state->empty() || int((*state)[0]) != ep) return;
  const int E = placement_->n_experts();
  const std::size_t per_layer = 1 + std::size_t(E) + 2 * std::size_t(E);
  EXA_REQUIRE(state->size() >= 3 && (state->size() - 3) % per_layer == 0,
              "checkpoint state {}: {} values, not 3 + a multiple of {} ({} experts)", kStateName, state->size(),
              per_layer, E);
  window_steps_ = get_count(state->data() + 1);
  const auto global = identity(E);
  for (std::size_t at = 3; at < state->size(); at += per_layer) {
    const float* p = state->data() + at;
    const std::int64_t layer = std::int64_t(p[0]);
    std::vector<int> expert_at(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) expert_at[std::size_t(e)] = int(p[1 + e]);
    if (expert_at != global) {
      placement_->set(layer, expert_at);  // checks the permutation first
      move({layer, global, expert_at});
    }
    auto& w = window_[layer];
    w.resize(std::size_t(E));
    for (int e = 0; e < E; ++e) w[std::size_t(e)] = get_count(p + 1 + E + 2 * e);
  }
}

void ExpertReplacement::in_global_order(const Mover& move, const std::function<void()>& fn) {
  if (!enabled() || placement_->all_identity()) return fn();
  const auto layers = placement_->moved_layers();
  std::map<std::int64_t, std::vector<int>> kept;
  const auto global = identity(placement_->n_experts());
  for (const auto l : layers) {
    kept[l] = placement_->expert_at(l);
    move({l, kept[l], global});
    placement_->set(l, global);
  }
  fn();
  for (const auto l : layers) {
    move({l, global, kept[l]});
    placement_->set(l, kept[l]);
  }
}

}  // namespace exa::train
