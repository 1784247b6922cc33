#pragma once
// The layout examoe-elastic relaunches a failed job on: the largest world
// size it may use for which the deck still makes a valid layout with the same
// global batch (docs/architecture.md, "Elastic restart").
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace exa::elastic {

// The resolved parallel sizes and batch of a deck at one world size.
struct Layout {
  int ranks = 1;
  int dp = 1, tp = 1, cp = 1, pp = 1, ep = 1;
  long micro_batch = 1, grad_accum = 1;
  long global_batch() const { return micro_batch * grad_accum * dp; }
};

// The --set overrides that turn the deck into `l` (dp, grad_accum, ep).
std::vector<std::string> overrides_for(const Layout& l);

// The largest world size in [min_ranks, below] that keeps `base`'s tp, cp
// and pp, shrinks dp (grad_accum grows so that micro_batch * grad_accum * dp
// stays base's global batch; a size where it does not divide is passed over),
// keeps ep or the largest divisor of it that divides the new dp * cp, and that
// `valid` accepts (the deck's own checks: examoe --check --ranks K).
std::optional<Layout> shrink(const Layout& base, int below, int min_ranks,
                             const std::function<bool(const Layout&)>& valid);

}  // namespace exa::elastic
