#include "parallel/expert/moe_load.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace exa::parallel::expert {

namespace {

std::int64_t max_of(const std::vector<std::int64_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double mean_of(const std::vector<std::int64_t>& v) {
  return v.empty() ? 0.0 : double(std::accumulate(v.begin(), v.end(), std::int64_t{0})) / double(v.size());
}

}  // namespace

std::vector<std::int64_t> LayerLoad::rank_tokens(int ep, const ExpertPlacement* placement) const {
  if (placement) return placement->rank_tokens(layer, kept);
  const auto E = static_cast<std::int64_t>(kept.size());
  EXA_REQUIRE(ep >= 1 && E % ep == 0, "MoeLoad: {} experts cannot be split over {} expert-parallel ranks", E, ep);
  std::vector<std::int64_t> r(static_cast<std::size_t>(ep), 0);
  for (std::int64_t e = 0; e < E; ++e) r[static_cast<std::size_t>(e / (E / ep))] += kept[static_cast<std::size_t>(e)];
  return r;
}

double max_over_mean(const std::vector<std::int64_t>& counts) {
  const double mean = mean_of(counts);
  return mean > 0 ? double(max_of(counts)) / mean : 1.0;
}

void MoeLoad::add(const std::vector<model::LayerRouting>& routing) {
  if (layers_.empty()) {
    for (const auto& r : routing) {
      LayerLoad l;
      l.layer = r.layer;
      l.routed.assign(r.routed.size(), 0);
      l.kept.assign(r.kept.size(), 0);
      layers_.push_back(std::move(l));
    }
  }
  EXA_REQUIRE(routing.size() == layers_.size(), "MoeLoad: a micro-batch reports {} MoE layers, the step {}",
              routing.size(), layers_.size());
  for (std::size_t i = 0; i < routing.size(); ++i) {
    const auto& r = routing[i];
    auto& l = layers_[i];
    EXA_REQUIRE(r.layer == l.layer && r.routed.size() == l.routed.size() && r.kept.size() == l.kept.size(),
                "MoeLoad: micro-batches disagree on MoE layer {} (layer {}, {} experts)", i, r.layer, r.routed.size());
    for (std::size_t e = 0; e < r.routed.size(); ++e) {
      l.routed[e] += r.routed[e];
      l.kept[e] += r.kept[e];
    }
    l.dropped += r.dropped;
  }
}

void MoeLoad::merge(const MoeLoad& other) {
  if (other.layers_.empty()) return;
  if (layers_.empty()) {
    layers_ = other.layers_;
    return;
  }
  EXA_REQUIRE(other.layers_.size() == layers_.size(), "MoeLoad: merging {} MoE layers into {}", other.layers_.size(),
              layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto& l = layers_[i];
    const auto& o = other.layers_[i];
    EXA_REQUIRE(o.layer == l.layer && o.routed.size() == l.routed.size(), "MoeLoad: merging another layer set");
    for (std::size_t e = 0; e < l.routed.size(); ++e) {
      l.routed[e] += o.routed[e];
      l.kept[e] += o.kept[e];
    }
    l.dropped += o.dropped;
  }
}

void MoeLoad::sum_over(MPI_Comm comm) {
  // Every layer's counts in one message: routed, kept, dropped per layer.
  std::vector<long long> buf;
  for (const auto& l : layers_) {
    buf.insert(buf.end(), l.routed.begin(), l.routed.end());
    buf.insert(buf.end(), l.kept.begin(), l.kept.end());
    buf.push_back(l.dropped);
  }
  if (buf.empty()) return;
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_LONG_LONG, MPI_SUM, comm);
  std::size_t at = 0;
  for (auto& l : layers_) {
    for (auto& x : l.routed) x = buf[at++];
    for (auto& x : l.kept) x = buf[at++];
    l.dropped = buf[at++];
  }
}

void MoeLoad::gather_stages(MPI_Comm stages, const model::ModelConfig& cfg) {
  std::vector<LayerLoad> all;
  for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
    if (!cfg.is_moe_layer(l)) continue;
    const auto it = std::find_if(layers_.begin(), layers_.end(), [&](const LayerLoad& x) { return x.layer == l; });
    if (it != layers_.end()) {
      all.push_back(*it);
    } else {
      LayerLoad z;  // another stage's layer: zeros, which the sum fills in
      z.layer = l;
      z.routed.assign(std::size_t(cfg.n_experts), 0);
      z.kept.assign(std::size_t(cfg.n_experts), 0);
      all.push_back(std::move(z));
    }
  }
  layers_ = std::move(all);
  sum_over(stages);
}

const LayerLoad& MoeLoad::worst() const {
  EXA_REQUIRE(!layers_.empty(), "MoeLoad::worst: no MoE layers");
  return *std::max_element(layers_.begin(), layers_.end(), [](const LayerLoad& a, const LayerLoad& b) {
    return max_over_mean(a.routed) < max_over_mean(b.routed);
  });
}

std::string moe_summary(const MoeLoad& load, int ep, const ExpertPlacement* placement) {
  if (load.empty()) return {};
  const auto& w = load.worst();
  return fmt::format("moe L{} exp {:.2f} rank {:.2f} drop {}", w.layer, max_over_mean(w.routed),
                     max_over_mean(w.rank_tokens(ep, placement)), w.dropped);
}

nlohmann::json moe_json(const MoeLoad& load, int ep, const model::RouterBias* bias,
                        const ExpertPlacement* placement) {
  if (load.empty()) return nullptr;
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : load.layers()) {
    const auto ranks = l.rank_tokens(ep, placement);
    nlohmann::json j;
    j["layer"] = l.layer;
    j["routed"] = l.routed;
    j["kept"] = l.kept;
    j["dropped"] = l.dropped;
    j["rank_tokens"] = ranks;
    j["expert_max"] = max_of(l.routed);
    j["expert_mean"] = mean_of(l.routed);
    j["expert_imbalance"] = max_over_mean(l.routed);
    j["rank_max"] = max_of(ranks);
    j["rank_mean"] = mean_of(ranks);
    j["rank_imbalance"] = max_over_mean(ranks);
    if (bias) j["router_bias"] = bias->row(l.layer);
    layers.push_back(std::move(j));
  }
  return nlohmann::json{{"ep", ep}, {"worst_layer", load.worst().layer}, {"layers", std::move(layers)}};
}

}  // namespace exa::parallel::expert
