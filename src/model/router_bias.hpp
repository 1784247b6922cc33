#pragma once
// The state of aux-loss-free load balancing (moe.router_bias = "aux_free",
// DeepSeek-V3; docs/architecture.md "The model"): one per-expert bias for
// every MoE layer of the model, added to the routing scores for the top-k
// selection only (kernels/router.hpp), never to the gates. After each
// optimizer step
//
//   b_e += bias_rate * sign(mean_e' load_e' - load_e)
//
// with load_e the tokens expert e kept in the step, summed over the
// micro-batches and the data-parallel ranks, so every rank holds the same
// biases. Kept as fp32 (the router's precision), row-major
// [n_moe_layers, E] in layer order: the checkpoint's /state/router_bias.
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "model/stage_model.hpp"

namespace exa::model {

// The name of the checkpoint state array holding RouterBias::values().
inline constexpr const char* kRouterBiasState = "router_bias";

class RouterBias {
 public:
  // Zero biases for every MoE layer of `cfg`.
  explicit RouterBias(const ModelConfig& cfg);

  const std::vector<std::int64_t>& layers() const { return layers_; }  // MoE layer indices, ascending
  std::int64_t n_experts() const { return n_experts_; }
  std::vector<std::int64_t> shape() const { return {std::int64_t(layers_.size()), n_experts_}; }
  const std::vector<float>& values() const { return values_; }
  // exa::Error unless `v` holds shape()'s product of values.
  void set_values(std::vector<float> v);
  // The biases of MoE layer `layer` (exa::Error when it is not one).
  std::vector<float> row(std::int64_t layer) const;

  // The update rule above for one layer, given the tokens each of its
  // experts kept (n_experts counts). Experts at exactly the mean keep their
  // bias.
  void update(std::int64_t layer, const std::vector<std::int64_t>& kept, double rate);

  // Hands each MoE layer of the stage its biases (StageModel::set_router_bias).
  template <class T, class D>
  void apply(StageModel<T, D>& m) const {
    for (const auto& l : m.layers())
      if (l.is_moe()) m.set_router_bias(l.index(), row(l.index()));
  }

 private:
  std::size_t index_of(std::int64_t layer) const;

  std::vector<std::int64_t> layers_;
  std::int64_t n_experts_ = 0;
  std::vector<float> values_;
};

}  // namespace exa::model
