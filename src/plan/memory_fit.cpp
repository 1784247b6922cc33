#include "plan/memory_fit.hpp"

#include <utility>

#include <fmt/format.h>

#include "core/deck/config.hpp"
#include "model/model_config.hpp"
#include "plan/candidate.hpp"
#include "plan/memory_model.hpp"

namespace exa::plan {

namespace {

constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;

std::string table(const MemoryBytes& m) {
  return fmt::format("parameters {:.1f}, gradients {:.1f}, optimizer {:.1f}, activations {:.1f}, communication "
                     "{:.1f}{}; total {:.1f}",
                     m.parameters / kMiB, m.gradients / kMiB, m.optimizer / kMiB, m.activations / kMiB,
                     m.communication / kMiB,
                     m.offload > 0 ? fmt::format(", offload {:.1f}", m.offload / kMiB) : std::string(),
                     m.total() / kMiB);
}

}  // namespace

std::vector<std::string> memory_fit_report(const deck::Config& cfg) {
  const auto mcfg = model::ModelConfig::from_deck(cfg);
  const Candidate c = Candidate::from_deck(cfg);
  int stage = 0;
  const MemoryBytes m = peak_memory(mcfg, c, &stage);
  std::vector<std::string> out;
  out.push_back(fmt::format("memory estimate per rank (MiB, the planner's model; pipeline stage {}): {}", stage,
                            table(m)));
  const double cap = cfg.get_float("memory.cap_gb") * kGiB;
  if (cap <= 0) return out;
  if (m.total() <= cap) {
    out.push_back(fmt::format("memory.cap_gb = {}: the estimate fits ({:.1f}% of the cap)",
                              cfg.get_float("memory.cap_gb"), 100.0 * m.total() / cap));
    return out;
  }
  // The deck's layout with other policies, least costly first: selective
  // recompute adds element-wise work, full a forward, offloading the
  // experts page traffic, then their optimizer state, ZeRO 3 gathers.
  const bool data = c.grid.dp * c.grid.cp > 1;
  std::vector<std::pair<std::string, Candidate>> tries;
  // The deck's own offload, then each level more of it.
  struct Offload {
    bool experts, optimizer;
  };
  std::vector<Offload> levels{{c.offload_experts, c.offload_optimizer}};
  if (!c.offload_experts) levels.push_back({true, false});
  if (!c.offload_optimizer) levels.push_back({true, true});
  for (int zero : {c.zero, 3}) {
    if (zero == 3 && (!data || c.zero == 3)) continue;
    for (const Offload off : levels) {
      for (const auto& [rc, ckl] : std::vector<std::pair<std::string, std::string>>{
               {"none", "all"}, {"selective", "all"}, {"full", "all"}, {"full", "sqrt"}}) {
        Candidate t = c;
        t.zero = zero;
        t.recompute = rc;
        t.checkpoint_layers = ckl;
        t.offload_experts = off.experts;
        t.offload_optimizer = off.experts && off.optimizer;
        if (rc == c.recompute && ckl == c.checkpoint_layers && zero == c.zero &&
            t.offload_experts == c.offload_experts && t.offload_optimizer == c.offload_optimizer)
          continue;
        std::string what = fmt::format("memory.recompute = \"{}\"", rc);
        if (ckl != "all") what += fmt::format(", memory.checkpoint_layers = \"{}\"", ckl);
        if (t.offload_experts != c.offload_experts) what += ", memory.offload_experts = true";
        if (t.offload_optimizer != c.offload_optimizer) what += ", memory.offload_optimizer = true";
        if (zero != c.zero) what += fmt::format(", parallel.zero = {}", zero);
        tries.emplace_back(what, t);
      }
    }
  }
  std::string fit;
  for (const auto& [what, t] : tries) {
    const MemoryBytes mt = peak_memory(mcfg, t);
    if (mt.total() <= cap) {
      fit = fmt::format("{} would fit ({:.3f} GiB: {})", what, mt.total() / kGiB, table(mt));
      break;
    }
  }
  out.push_back(fmt::format(
      "WARNING: memory.cap_gb = {}: the estimate ({:.3f} GiB) does not fit; {}", cfg.get_float("memory.cap_gb"),
      m.total() / kGiB,
      fit.empty() ? "no recompute or ZeRO policy of this layout fits: use more ranks (tp, pp or ep) or smaller "
                    "micro-batches, or run examoe-plan for a layout that fits"
                  : fit));
  return out;
}

}  // namespace exa::plan
