#pragma once
// Values the deck leaves to ExaMoE: 0 meaning "infer" or "same as X".
// Each resolved setting keeps its origin and records how it was derived, so
// the dump shows both what the user wrote and what the run uses.
#include "core/deck/config.hpp"

namespace exa::deck {

// parallel.dp = 0        -> world / (pp*cp*tp)   (check_world has passed)
// model.n_kv_heads = 0   -> model.n_heads
// parallel.microbatches = 0 -> train.grad_accum
// output.metrics_every = 0  -> train.log_every
// parallel.ranks_per_node = 0 stays 0: it is detected at run time.
void resolve_derived(Config& config);

}  // namespace exa::deck
