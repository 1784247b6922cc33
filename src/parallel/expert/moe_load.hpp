#pragma once
// Expert load of one training step: per MoE layer, the tokens routed to and
// kept by each expert and the tokens each expert-parallel rank receives,
// summed over the step's micro-batches and the data-parallel ranks; and its
// two renderings, the log line's short summary and metrics.jsonl's "moe"
// record (docs/parallel.md, "Expert load and aux-loss-free balancing").
//
//   MoeLoad load;
//   for (each micro-batch) load.add(forward_result.routing);
//   load.sum_over(grid.comm(comm::Group::Data));   // identical on every rank
//   log(moe_summary(load, ep)); metrics(moe_json(load, ep));
//
// An EP rank j holds the experts [j*E/ep, (j+1)*E/ep) (docs/architecture.md,
// "Parallel layout"), so its load is the sum of their kept counts: summed
// over the data group, that is EP rank j of every expert-data replica
// together.
#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/forward_result.hpp"
#include "model/model_config.hpp"
#include "model/router_bias.hpp"
#include "parallel/expert/expert_placement.hpp"

namespace exa::parallel::expert {

// One MoE layer's counts.
struct LayerLoad {
  std::int64_t layer = 0;
  std::vector<std::int64_t> routed;  // [E] assignments before capacity dropping
  std::vector<std::int64_t> kept;    // [E] assignments after dropping
  std::int64_t dropped = 0;

  // Tokens EP rank j receives: sum of kept over its E/ep experts (those of
  // its slots under `placement`, expert re-placement). [ep]
  std::vector<std::int64_t> rank_tokens(int ep, const ExpertPlacement* placement = nullptr) const;
};

// max/mean of counts (1 when they sum to 0: nothing is imbalanced).
double max_over_mean(const std::vector<std::int64_t>& counts);

class MoeLoad {
 public:
  // Adds one micro-batch's routing statistics (model::ForwardResult::routing).
  // Layers are matched by index; the first call fixes which layers there are.
  void add(const std::vector<model::LayerRouting>& routing);
  // Sums the counts over `comm` (collective; every rank must have added the
  // same layers). A no-op without MoE layers.
  void sum_over(MPI_Comm comm);
  // Adds another step part's counts (the same layers; either may be empty).
  void merge(const MoeLoad& other);
  // Pipeline parallelism: each stage added its own MoE layers; afterwards
  // every stage holds every MoE layer of `cfg` (in layer order) with the
  // counts of the stage that ran it. Collective over `stages`, the same
  // message on every stage, also one without an MoE layer.
  void gather_stages(MPI_Comm stages, const model::ModelConfig& cfg);

  bool empty() const { return layers_.empty(); }
  const std::vector<LayerLoad>& layers() const { return layers_; }
  // The layer with the largest expert max/mean of routed tokens (the first
  // of equals); empty() must be false.
  const LayerLoad& worst() const;

 private:
  std::vector<LayerLoad> layers_;
};

// "moe L1 exp 3.98 rank 1.99 drop 0": the worst layer, its expert (routed)
// and EP-rank (received) max/mean and its dropped tokens. Empty when there
// are no MoE layers.
std::string moe_summary(const MoeLoad& load, int ep, const ExpertPlacement* placement = nullptr);
// {"ep", "worst_layer", "layers": [{"layer", "routed", "kept", "dropped",
//   "rank_tokens", "expert_max", "expert_mean", "expert_imbalance",
//   "rank_max", "rank_mean", "rank_imbalance"[, "router_bias"]}]};
// "router_bias" (each layer's biases) when `bias` is given (aux_free). Null
// when there are no MoE layers.
nlohmann::json moe_json(const MoeLoad& load, int ep, const model::RouterBias* bias = nullptr,
                        const ExpertPlacement* placement = nullptr);

}  // namespace exa::parallel::expert
