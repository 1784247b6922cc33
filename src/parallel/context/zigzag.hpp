#pragma once
// The zigzag split of context parallelism (docs/architecture.md, "Context
// parallelism"): each sequence of T tokens is cut into 2·cp chunks of
// c = T / (2·cp); CP rank r holds chunks r and 2·cp − 1 − r, in that order,
// as its T / cp local rows. Under a causal mask chunk i costs about i units
// of attention work, so every rank does (r + 1/2) + (2cp − r − 1/2) = 2cp
// units: the causal load is balanced (Megatron's and ring-flash-attention's
// split).
#include <cstdint>
#include <vector>

#include "model/seams/core_attention.hpp"

namespace exa::parallel::context {

struct Zigzag {
  int cp = 1, rank = 0;

  // Chunk length c for sequences of T tokens (exa::Error unless 2·cp | T).
  std::int64_t chunk_len(std::int64_t T) const;
  // Global chunk index of local chunk a (0 or 1) of CP rank `r`.
  std::int64_t chunk_of(int r, int a) const { return a == 0 ? r : 2 * std::int64_t(cp) - 1 - r; }
  // This rank's two chunks as rows of its local sequences of T / cp rows.
  std::vector<model::TokenChunk> chunks(std::int64_t T_local) const;
  // This rank's rows of B row-major sequences of T tokens: [B, T / cp].
  std::vector<std::int32_t> slice(const std::vector<std::int32_t>& x, std::int64_t B, std::int64_t T) const;
};

}  // namespace exa::parallel::context
