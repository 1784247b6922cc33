#include "parallel/pipeline/stage_split.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "model/parameter_specs.hpp"
#include "model/unit_hooks.hpp"

namespace exa::parallel::pipeline {

std::vector<double> unit_costs(const model::ModelConfig& cfg) {
  const int U = model::n_units(cfg.n_layers);
  std::vector<double> flops(static_cast<std::size_t>(U), 0.0), bytes(static_cast<std::size_t>(U), 0.0);
  for (const auto& s : model::parameter_specs(cfg))
    bytes[std::size_t(model::unit_of(s.name, cfg.n_layers))] += 4.0 * double(s.numel());
  // Matmul FLOPs per token, forward + backward (6 per weight a token
  // touches), and attention's two products, halved by the causal mask.
  const double d = double(cfg.d_model), hd = double(cfg.head_dim());
  const double attn = d * hd * double(2 * cfg.n_heads + 2 * cfg.n_kv_heads);
  for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
    double active = attn;
    if (cfg.is_moe_layer(l))
      active += d * double(cfg.n_experts) + 3.0 * d * double(cfg.d_expert) * double(cfg.top_k + cfg.n_shared_experts);
    else
      active += 3.0 * d * double(cfg.d_ff);
    flops[std::size_t(l + 1)] = 6.0 * active + 6.0 * double(cfg.n_heads) * hd * double(cfg.seq_len);
  }
  flops[std::size_t(U - 1)] = 6.0 * d * double(cfg.vocab_size);
  if (cfg.tie_embeddings) bytes[std::size_t(U - 1)] += bytes[0];  // the head's copy
  const double tf = std::accumulate(flops.begin(), flops.end(), 0.0);
  const double tb = std::accumulate(bytes.begin(), bytes.end(), 0.0);
  std::vector<double> c(static_cast<std::size_t>(U));
  for (int u = 0; u < U; ++u) c[std::size_t(u)] = flops[std::size_t(u)] / tf + bytes[std::size_t(u)] / tb;
  return c;
}

std::vector<std::int64_t> balanced_layers(const model::ModelConfig& cfg, int pp) {
  const std::int64_t L = cfg.n_layers;
  EXA_REQUIRE(pp >= 1 && pp <= L, "pipeline: {} stages for {} layers; every stage needs a layer (pp <= n_layers)", pp,
              L);
  const auto c = unit_costs(cfg);
  // prefix[i] = cost of layers [0, i); the embedding joins the first
  // stage, the head the last.
  std::vector<double> prefix(std::size_t(L + 1), 0.0);
  for (std::int64_t l = 0; l < L; ++l) prefix[std::size_t(l + 1)] = prefix[std::size_t(l)] + c[std::size_t(l + 1)];
  auto cost = [&](std::int64_t a, std::int64_t b) {  // the stage of layers [a, b)
    return prefix[std::size_t(b)] - prefix[std::size_t(a)] + (a == 0 ? c.front() : 0.0) + (b == L ? c.back() : 0.0);
  };
  // best[k][i]: the least bottleneck splitting layers [0, i) over k stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(std::size_t(pp + 1), std::vector<double>(std::size_t(L + 1), inf));
  std::vector<std::vector<std::int64_t>> cut(best.size(), std::vector<std::int64_t>(std::size_t(L + 1), 0));
  for (std::int64_t i = 1; i <= L; ++i) best[1][std::size_t(i)] = cost(0, i);
  for (int k = 2; k <= pp; ++k)
    for (std::int64_t i = k; i <= L; ++i)
      for (std::int64_t j = k - 1; j < i; ++j) {
        const double b = std::max(best[std::size_t(k - 1)][std::size_t(j)], cost(j, i));
        if (b < best[std::size_t(k)][std::size_t(i)] - 1e-12) {
          best[std::size_t(k)][std::size_t(i)] = b;
          cut[std::size_t(k)][std::size_t(i)] = j;
        }
      }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(pp));
  std::int64_t end = L;
  for (int k = pp; k >= 1; --k) {
    const std::int64_t begin = k == 1 ? 0 : cut[std::size_t(k)][std::size_t(end)];
    counts[std::size_t(k - 1)] = end - begin;
    end = begin;
  }
  return counts;
}

std::vector<std::int64_t> parse_layers_per_stage(const std::string& text, std::int64_t n_layers, int pp,
                                                 const std::string& where) {
  std::vector<std::int64_t> counts;
  if (text == "auto" || text.find_first_not_of(" \t") == std::string::npos) return counts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    std::int64_t n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    EXA_REQUIRE(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos && n >= 1,
                "{} pipeline.layers_per_stage = \"{}\": '{}' is not a layer count >= 1; write one count per stage, "
                "e.g. \"3,1\"",
                where, text, item);
    counts.push_back(n);
  }
  const std::int64_t sum = std::accumulate(counts.begin(), counts.end(), std::int64_t(0));
  EXA_REQUIRE(std::int64_t(counts.size()) == pp && sum == n_layers,
              "{} pipeline.layers_per_stage = \"{}\" gives {} stages {} layers, but parallel.pp = {} and "
              "model.n_layers = {}; give pp counts summing to n_layers (or \"auto\" for the balanced split)",
              where, text, counts.size(), sum, pp, n_layers);
  return counts;
}

std::vector<std::int64_t> stage_boundaries(const model::ModelConfig& cfg, int pp,
                                           const std::vector<std::int64_t>& layers_per_stage) {
  const auto counts = layers_per_stage.empty() ? balanced_layers(cfg, pp) : layers_per_stage;
  EXA_REQUIRE(std::int64_t(counts.size()) == pp &&
                  std::accumulate(counts.begin(), counts.end(), std::int64_t(0)) == cfg.n_layers,
              "pipeline: {} layer counts for {} stages do not cover the model's {} layers", counts.size(), pp,
              cfg.n_layers);
  std::vector<std::int64_t> b{0};
  for (const auto n : counts) b.push_back(b.back() + n);
  return b;
}

}  // namespace exa::parallel::pipeline
