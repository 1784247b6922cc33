#pragma once
// The sequence lengths of token-budget dynamic batching (train.batch_tokens,
// io/token_budget.hpp): T, T/2, T/4, T/8 for T = model.seq_len, each kept
// while it is a whole number of at least 8 tokens. The deck checks the
// layouts against them before any data is read.
#include <cstdint>
#include <vector>

namespace exa {

inline std::vector<std::int64_t> length_buckets(std::int64_t seq_len) {
  std::vector<std::int64_t> l{seq_len};
  for (int k = 1; k < 4 && seq_len % (std::int64_t(1) << k) == 0 && (seq_len >> k) >= 8; ++k) l.push_back(seq_len >> k);
  return l;
}

}  // namespace exa
