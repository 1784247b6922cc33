#pragma once
// Expert growth in the training loop (the deck's [growth];
// docs/architecture.md "Expert growth"). It keeps what a growth event
// decides from: each MoE layer's kept tokens per expert since the last
// event (summed over the data group, so every rank decides alike) and the
// clone families (which experts descend from one expert of the first
// model). At an event it chooses each layer's parents, the `add` experts
// that kept the most tokens (the lower id first among equals), and says
// where every row of the grown tensors comes from. The Trainer moves the
// state (io::exchange_pieces) and adds the noise.
//
// Its state is saved in every checkpoint (/state/growth_*), so a run
// resumed anywhere, inside a window too, decides the next event as the
// uninterrupted run does.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.hpp"
#include "model/growth_schedule.hpp"
#include "model/model_config.hpp"
#include "parallel/expert/moe_load.hpp"

namespace exa::train {

// One event's decisions.
struct GrowthEvent {
  std::int64_t step = 0;  // steps done when it happened
  std::int64_t from = 0, to = 0;  // experts per MoE layer
  std::map<std::int64_t, std::vector<std::int64_t>> parents;  // layer -> parent of child from, from+1, ...
  // Rows of the grown tensors, by tensor name: row i of the new tensor is
  // row rows[i] of the old one (-1: as drawn at step 0 in the new model).
  std::map<std::string, std::vector<std::int64_t>> rows;
};

class ExpertGrowth {
 public:
  ExpertGrowth(model::GrowthSchedule schedule, const model::ModelConfig& mcfg);

  const model::GrowthSchedule& schedule() const { return schedule_; }
  bool enabled() const { return schedule_.enabled(); }
  std::int64_t experts() const { return experts_; }

  // Adds an applied step's loads to the window.
  void after_step(const parallel::expert::MoeLoad& load);
  // The event due after `steps_done` steps (grows_after), decided from the
  // window, which then starts again; the families take the children.
  GrowthEvent decide(std::int64_t steps_done);
  // Layer `layer`'s clone ring (kernels/router.hpp): empty when no expert
  // of it has a clone.
  std::vector<int> ring(std::int64_t layer) const;
  const std::vector<GrowthEvent>& history() const { return history_; }

  // /state/growth_window (kept tokens as [n_moe, E, 2]: high and low 24
  // bits, exact in float), /state/growth_family ([n_moe, E], each expert's
  // ancestor in the first model) and /state/growth_history ([events, 3]:
  // step, from, to). Nothing when growth is off.
  void save(io::CheckpointMeta& meta) const;
  // From a loaded checkpoint of a model with `experts` experts per layer.
  // A checkpoint without the state (growth was off) starts a window and
  // families of singletons.
  void restore(const io::CheckpointMeta& meta, std::int64_t experts);

 private:
  void reset(std::int64_t experts);

  model::GrowthSchedule schedule_;
  std::vector<std::int64_t> layers_;  // MoE layer indices, ascending
  std::int64_t experts_ = 0;
  std::vector<std::vector<std::int64_t>> window_;  // [moe layer][expert] kept tokens
  std::vector<std::vector<std::int64_t>> family_;  // [moe layer][expert] first-model ancestor
  std::vector<GrowthEvent> history_;
};

}  // namespace exa::train
