#pragma once
// What a deck may ask for that only the build or the node can refuse: NCCL
// without it, or without a visible GPU. Every other combination is checked
// when the deck is loaded (core/deck/deck_checks.cpp). The Trainer checks
// this before any work is done, and `examoe --check` before the job is queued.
#include "core/deck/config.hpp"

namespace exa::train {

// exa::Error naming the key and the value that works. `on_run_node`: also
// check what only the node that runs can tell (a visible GPU for NCCL);
// false for `examoe --check`, which may run on a login node without one.
void require_supported_layout(const deck::Config& cfg, bool on_run_node);

}  // namespace exa::train
