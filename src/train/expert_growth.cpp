#include "train/expert_growth.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::train {

namespace {
constexpr const char* kWindow = "growth_window";
constexpr const char* kFamily = model::kGrowthFamilyState;
constexpr const char* kHistory = "growth_history";
constexpr std::int64_t kLow = std::int64_t(1) << 24;
}  // namespace

ExpertGrowth::ExpertGrowth(model::GrowthSchedule schedule, const model::ModelConfig& mcfg)
    : schedule_(std::move(schedule)) {
  for (std::int64_t l = 0; l < mcfg.n_layers; ++l)
    if (mcfg.is_moe_layer(l)) layers_.push_back(l);
  reset(mcfg.n_experts);
}

void ExpertGrowth::reset(std::int64_t experts) {
  experts_ = experts;
  window_.assign(layers_.size(), std::vector<std::int64_t>(std::size_t(experts), 0));
  family_.assign(layers_.size(), std::vector<std::int64_t>(std::size_t(experts)));
  for (auto& f : family_) std::iota(f.begin(), f.end(), std::int64_t{0});
}

void ExpertGrowth::after_step(const parallel::expert::MoeLoad& load) {
  if (!enabled()) return;
  for (const auto& l : load.layers()) {
    const auto it = std::find(layers_.begin(), layers_.end(), l.layer);
    if (it == layers_.end()) continue;
    auto& w = window_[std::size_t(it - layers_.begin())];
    EXA_REQUIRE(l.kept.size() == w.size(), "ExpertGrowth: layer {} reports {} experts, the model has {}", l.layer,
                l.kept.size(), w.size());
    for (std::size_t e = 0; e < w.size(); ++e) w[e] += l.kept[e];
  }
}

GrowthEvent ExpertGrowth::decide(std::int64_t steps_done) {
  GrowthEvent ev;
  ev.step = steps_done;
  ev.from = experts_;
  ev.to = schedule_.experts_after(steps_done);
  EXA_REQUIRE(ev.to > ev.from && ev.to - ev.from <= ev.from,
              "ExpertGrowth: step {} grows {} experts to {} (at most doubling)", steps_done, ev.from, ev.to);
  const std::int64_t add = ev.to - ev.from;
  const auto init = schedule_.init;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::int64_t layer = layers_[i];
    std::vector<std::int64_t> order(std::size_t(ev.from));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    const auto& w = window_[i];
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return w[std::size_t(a)] > w[std::size_t(b)]; });
    std::vector<std::int64_t> parents(order.begin(), order.begin() + add);
    std::sort(parents.begin(), parents.end());
    const std::string L = "layers." + std::to_string(layer) + ".moe.";
    std::vector<std::int64_t> experts(std::size_t(ev.to)), router(std::size_t(ev.to));
    std::iota(experts.begin(), experts.begin() + ev.from, std::int64_t{0});
    std::iota(router.begin(), router.begin() + ev.from, std::int64_t{0});
    for (std::int64_t c = 0; c < add; ++c) {
      const std::int64_t p = parents[std::size_t(c)];
      experts[std::size_t(ev.from + c)] = init == model::GrowthInit::random ? -1 : p;
      router[std::size_t(ev.from + c)] = init == model::GrowthInit::split ? p : -1;
    }
    for (const char* t : {"experts.w1", "experts.w3", "experts.w2"}) ev.rows[L + t] = experts;
    ev.rows[L + "router.weight"] = router;
    if (init == model::GrowthInit::random) parents.assign(std::size_t(add), -1);
    // Only a clone with its parent's router row is its family: its scores
    // tie with the parent's. Others start families of their own.
    auto& fam = family_[i];
    for (std::int64_t c = 0; c < add; ++c) {
      const std::int64_t p = parents[std::size_t(c)];
      fam.push_back(init == model::GrowthInit::split ? fam[std::size_t(p)] : ev.from + c);
    }
    window_[i].assign(std::size_t(ev.to), 0);
    ev.parents[layer] = parents;
  }
  experts_ = ev.to;
  history_.push_back(ev);
  return ev;
}

std::vector<int> ExpertGrowth::ring(std::int64_t layer) const {
  const auto it = std::find(layers_.begin(), layers_.end(), layer);
  if (it == layers_.end()) return {};
  return model::clone_ring(family_[std::size_t(it - layers_.begin())]);
}

void ExpertGrowth::save(io::CheckpointMeta& meta) const {
  if (!enabled()) return;
  const auto n = std::int64_t(layers_.size());
  io::StateArray window{{n, experts_, 2}, {}}, family{{n, experts_}, {}};
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (std::size_t e = 0; e < std::size_t(experts_); ++e) {
      window.values.push_back(float(window_[i][e] / kLow));
      window.values.push_back(float(window_[i][e] % kLow));
      family.values.push_back(float(family_[i][e]));
    }
  io::StateArray hist{{std::int64_t(history_.size()), 3}, {}};
  for (const auto& h : history_)
    for (const auto v : {h.step, h.from, h.to}) hist.values.push_back(float(v));
  meta.state[kWindow] = std::move(window);
  meta.state[kFamily] = std::move(family);
  if (!history_.empty()) meta.state[kHistory] = std::move(hist);
}

void ExpertGrowth::restore(const io::CheckpointMeta& meta, std::int64_t experts) {
  reset(experts);
  history_.clear();
  if (!enabled()) return;
  const auto w = meta.state.find(kWindow), f = meta.state.find(kFamily);
  if (w == meta.state.end() || f == meta.state.end()) {
    log::info("growth: the checkpoint has no growth state (written without [growth]); a new window starts");
    return;
  }
  const std::vector<std::int64_t> want{std::int64_t(layers_.size()), experts};
  EXA_REQUIRE(f->second.shape == want && w->second.shape == std::vector<std::int64_t>({want[0], want[1], 2}),
              "growth: the checkpoint's growth state is for {} experts per layer, the model has {}: the checkpoint "
              "is damaged or was written by another version",
              f->second.shape.size() > 1 ? f->second.shape[1] : 0, experts);
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (std::size_t e = 0; e < std::size_t(experts); ++e) {
      const std::size_t k = i * std::size_t(experts) + e;
      window_[i][e] = std::int64_t(w->second.values[2 * k]) * kLow + std::int64_t(w->second.values[2 * k + 1]);
      family_[i][e] = std::int64_t(f->second.values[k]);
    }
  if (const auto h = meta.state.find(kHistory); h != meta.state.end())
    for (std::size_t r = 0; r + 2 < h->second.values.size(); r += 3) {
      GrowthEvent ev;
      ev.step = std::int64_t(h->second.values[r]);
      ev.from = std::int64_t(h->second.values[r + 1]);
      ev.to = std::int64_t(h->second.values[r + 2]);
      history_.push_back(ev);
    }
}

}  // namespace exa::train
