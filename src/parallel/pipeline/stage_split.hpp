#pragma once
// How pipeline parallelism splits the layers over its stages
// (docs/architecture.md, "Pipeline parallelism"): contiguous ranges, the
// first stage also holding the embedding and the last the final norm and LM
// head. The default split balances each stage's share of the counted
// training FLOPs plus its share of the parameter bytes (embedding and head
// included); pipeline.layers_per_stage names the counts instead.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace exa::parallel::pipeline {

// Relative cost of each unit (embedding, the n_layers layers, head): its
// share of the matmul FLOPs per token plus its share of the parameter bytes.
std::vector<double> unit_costs(const model::ModelConfig& cfg);

// Layers per stage (pp counts, each >= 1, summing to n_layers) minimising
// the most expensive stage's cost. exa::Error when pp exceeds the layers.
std::vector<std::int64_t> balanced_layers(const model::ModelConfig& cfg, int pp);

// Parses "a,b,..." (pipeline.layers_per_stage). exa::Error, prefixed with
// `where` (the deck's file:line), unless it names pp counts >= 1 summing to
// n_layers. "auto" (or nothing) gives an empty list: the balanced split.
std::vector<std::int64_t> parse_layers_per_stage(const std::string& text, std::int64_t n_layers, int pp,
                                                 const std::string& where);

// Each stage's first layer and the end: pp + 1 boundaries.
std::vector<std::int64_t> stage_boundaries(const model::ModelConfig& cfg, int pp,
                                           const std::vector<std::int64_t>& layers_per_stage);

}  // namespace exa::parallel::pipeline
