#include "model/router_bias.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace exa::model {

RouterBias::RouterBias(const ModelConfig& cfg) : n_experts_(cfg.n_experts) {
  for (std::int64_t l = 0; l < cfg.n_layers; ++l)
    if (cfg.is_moe_layer(l)) layers_.push_back(l);
  values_.assign(layers_.size() * static_cast<std::size_t>(n_experts_), 0.0f);
}

void RouterBias::set_values(std::vector<float> v) {
  EXA_REQUIRE(v.size() == values_.size(),
              "RouterBias: {} values given for {} MoE layers x {} experts (the model's router_bias is [{}, {}])",
              v.size(), layers_.size(), n_experts_, layers_.size(), n_experts_);
  values_ = std::move(v);
}

std::size_t RouterBias::index_of(std::int64_t layer) const {
  const auto it = std::find(layers_.begin(), layers_.end(), layer);
  EXA_REQUIRE(it != layers_.end(), "RouterBias: layer {} is not a MoE layer", layer);
  return static_cast<std::size_t>(it - layers_.begin());
}

std::vector<float> RouterBias::row(std::int64_t layer) const {
  const auto at = values_.begin() + static_cast<std::ptrdiff_t>(index_of(layer) * std::size_t(n_experts_));
  return std::vector<float>(at, at + n_experts_);
}

void RouterBias::update(std::int64_t layer, const std::vector<std::int64_t>& kept, double rate) {
  EXA_REQUIRE(std::int64_t(kept.size()) == n_experts_, "RouterBias: layer {} has {} experts, {} loads given", layer,
              n_experts_, kept.size());
  const std::size_t i = index_of(layer);
  // sign(mean - load_e) compared as E*load_e against the sum: exact in integers.
  const std::int64_t sum = std::accumulate(kept.begin(), kept.end(), std::int64_t{0});
  const float step = static_cast<float>(rate);
  for (std::int64_t e = 0; e < n_experts_; ++e) {
    const std::int64_t scaled = kept[std::size_t(e)] * n_experts_;
    float& b = values_[i * std::size_t(n_experts_) + std::size_t(e)];
    if (scaled < sum) b += step;
    else if (scaled > sum) b -= step;
  }
}

}  // namespace exa::model
