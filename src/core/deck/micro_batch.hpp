#pragma once
// The most sequences of model.seq_len a micro-batch holds, as the deck sets
// them: train.micro_batch (training windows, and evaluation's always), or,
// under token budgets (train.batch_tokens > 0), as many full-length
// sequences as a budget holds when that is more. What memory estimates
// size for.
#include <algorithm>
#include <cstdint>

#include "core/deck/config.hpp"

namespace exa::deck {

inline std::int64_t micro_batch_sequences(const Config& c) {
  const std::int64_t budget = c.get_int("train.batch_tokens"), mb = c.get_int("train.micro_batch");
  return budget > 0 ? std::max(mb, budget / c.get_int("model.seq_len")) : mb;
}

}  // namespace exa::deck
