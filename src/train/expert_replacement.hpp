#pragma once
// Expert re-placement (moe.replace_every, moe.replace_threshold;
// docs/architecture.md, "Expert parallelism"). Every replace_every steps,
// for each MoE layer whose EP-rank load max/mean over the window (the
// tokens each rank received, summed over the window's steps and the data
// group) exceeds replace_threshold, a new placement balances the window's
// expert loads (parallel::expert::balanced_placement) and is taken when it lowers
// that max/mean. The experts that change slot move with their weights and
// AdamW moments (parallel::expert::move_experts). The losses do not change: only who
// computes each expert does.
//
// Every rank decides alike from the same summed loads. Checkpoints are
// written with every layer in the identity placement (experts in global
// order, what every layout reads), and the run's placement is restored
// after the write. The checkpoint also keeps the placement and the
// window: a run resumed at the same ep moves its experts back into that
// placement and goes on with that window, as the uninterrupted run does
// (top-k compression, whose segments follow the slots, depends on it);
// at another ep it starts from the identity placement and a new window.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/deck/config.hpp"
#include "model/model_config.hpp"
#include "parallel/expert/expert_mover.hpp"
#include "parallel/expert/expert_placement.hpp"
#include "parallel/expert/moe_load.hpp"

namespace exa::train {

class ExpertReplacement {
 public:
  using Mover = std::function<void(const parallel::expert::ExpertMove&)>;

  // Off unless moe.replace_every > 0 (the deck refuses that without ep > 1).
  ExpertReplacement(const deck::Config& cfg, const model::ModelConfig& mcfg, int ep);

  bool enabled() const { return every_ > 0; }
  // What the dispatcher follows (null when off).
  std::shared_ptr<const parallel::expert::ExpertPlacement> placement() const { return placement_; }

  // Adds an applied step's loads to the window; after every replace_every
  // steps decides as above, moving experts with `move`. Returns one record
  // per re-placed layer ({"layer", "rank_imbalance_before", "..._after",
  // "moved", "placement"}), empty when nothing changed.
  std::vector<nlohmann::json> after_step(const parallel::expert::MoeLoad& load, std::int64_t steps_done, const Mover& move);

  // Runs `fn` with every layer in the identity placement, then moves the
  // experts back (around a checkpoint write).
  void in_global_order(const Mover& move, const std::function<void()>& fn);
  // The parameters were just loaded in global order (resume, rollback): the
  // identity placement again, and a new window.
  void forget_placement();
  // The placement and the window, for a checkpoint of a run at `ep` (empty
  // when off), and back after the parameters were loaded in global order:
  // the saved placement taken again, its experts moved with `move`, when
  // the checkpoint's ep is `ep`; else forget_placement().
  static constexpr const char* kStateName = "expert_replacement";
  std::vector<float> state(int ep) const;
  void restore(const std::vector<float>* state, int ep, const Mover& move);

 private:
  std::int64_t every_ = 0;
  double threshold_ = 0;
  std::shared_ptr<parallel::expert::ExpertPlacement> placement_;
  std::map<std::int64_t, std::vector<std::int64_t>> window_;  // layer -> kept per expert
  std::int64_t window_steps_ = 0;
};

}  // namespace exa::train
