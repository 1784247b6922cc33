#include "elastic_layout.hpp"

namespace exa::elastic {

std::vector<std::string> overrides_for(const Layout& l) {
  return {"parallel.dp=" + std::to_string(l.dp), "train.grad_accum=" + std::to_string(l.grad_accum),
          "parallel.ep=" + std::to_string(l.ep)};
}

std::optional<Layout> shrink(const Layout& base, int below, int min_ranks,
                             const std::function<bool(const Layout&)>& valid) {
  const int model = base.tp * base.cp * base.pp;  // ranks one data-parallel replica spans
  const long sequences = base.global_batch() / base.micro_batch;  // micro-batches per step, all replicas
  for (int k = below; k >= min_ranks && k >= 1; --k) {
    if (k % model != 0) continue;
    Layout l = base;
    l.ranks = k;
    l.dp = k / model;
    if (sequences % l.dp != 0) continue;  // the global batch would change
    l.grad_accum = sequences / l.dp;
    // Expert parallelism is carved out of dp * cp: keep as much of it as fits.
    for (int ep = base.ep; ep >= 1; --ep) {
      if (base.ep % ep != 0 || (l.dp * l.cp) % ep != 0) continue;
      l.ep = ep;
      if (valid(l)) return l;
    }
  }
  return std::nullopt;
}

}  // namespace exa::elastic
