#include "model/growth_schedule.hpp"

#include <algorithm>

#include "core/deck/config.hpp"

namespace exa::model {

GrowthSchedule GrowthSchedule::from_deck(const deck::Config& cfg) {
  GrowthSchedule g;
  g.every = cfg.get_int("growth.every");
  g.add = cfg.get_int("growth.add");
  g.start = cfg.get_int("moe.n_experts");
  g.max = std::max(g.start, cfg.get_int("growth.max_experts"));
  const auto init = cfg.get_string("growth.init");
  g.init = init == "copy" ? GrowthInit::copy : init == "random" ? GrowthInit::random : GrowthInit::split;
  g.noise = cfg.get_float("growth.noise");
  if (cfg.get_int("moe.moe_every") == 0) g.every = 0;  // a dense model has no experts to grow
  return g;
}

std::int64_t GrowthSchedule::experts_after(std::int64_t steps_done) const {
  if (!enabled() || steps_done <= 0) return start;
  return std::min(max, start + add * (steps_done / every));
}

std::vector<std::int64_t> GrowthSchedule::counts() const {
  std::vector<std::int64_t> out{start};
  if (!enabled()) return out;
  while (out.back() < max) out.push_back(std::min(max, out.back() + add));
  return out;
}

ModelConfig model_config_at(const deck::Config& cfg, std::int64_t steps_done) {
  auto m = ModelConfig::from_deck(cfg);
  m.n_experts = GrowthSchedule::from_deck(cfg).experts_after(steps_done);
  return m;
}

std::vector<int> clone_ring(const std::vector<std::int64_t>& fam) {
  std::vector<int> ring(fam.size());
  bool any = false;
  for (std::size_t e = 0; e < fam.size(); ++e) {
    std::size_t next = e;
    for (std::size_t f = e + 1; f < fam.size() && next == e; ++f)
      if (fam[f] == fam[e]) next = f;
    for (std::size_t f = 0; f < e && next == e; ++f)
      if (fam[f] == fam[e]) next = f;
    ring[e] = int(next);
    any = any || next != e;
  }
  return any ? ring : std::vector<int>{};
}

const char* to_string(GrowthInit init) {
  switch (init) {
    case GrowthInit::split: return "split";
    case GrowthInit::copy: return "copy";
    case GrowthInit::random: return "random";
  }
  return "?";
}

}  // namespace exa::model
