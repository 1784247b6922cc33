#pragma once
// Token-budget dynamic batching (train.batch_tokens; docs/data.md,
// "Dynamic batching"): micro-batches of whole documents of varying length,
// sized by a token budget instead of a sequence count.
//
// The documents of the training split are cut into pieces of at most T =
// model.seq_len tokens (only longer documents are split) and sorted into
// length buckets: T, T/2, T/4, T/8 (those that are whole numbers of at
// least 8 tokens); a piece goes to the shortest bucket that holds it. A
// micro-batch of bucket L holds floor(batch_tokens / L) sequences of L
// rows (core/length_buckets.hpp), each one piece from row 0 followed by padding (token 0, target -1).
// Targets follow a piece's document; a piece's last row predicts the next
// token only when its document goes on, as in sequence packing.
//
// Micro-batch m of step s is drawn with a counter-based RNG keyed by
// train.seed: its bucket with probability proportional to the bucket's
// tokens (so every token is as likely to be seen as under windows), then
// its pieces uniformly from that bucket, with replacement. It is a pure
// function of (seed, s, m): a step's micro-batches are the same in every
// layout (data-parallel rank r takes micro-batches [r A, (r+1) A) of the
// dp A of the step), and a restart draws them again.
#include <cstdint>
#include <vector>

#include "io/document_packing.hpp"
#include "io/token_store.hpp"

namespace exa::io {

struct Batch;

// A batch's sizes: sequences of `rows` rows each, the tokens among those
// rows that are not padding, and the targets that count in the loss.
struct BatchCounts {
  std::int64_t sequences = 0, rows = 0, tokens = 0, targets = 0;
  std::int64_t cells() const { return sequences * rows; }
};

class TokenBudget {
 public:
  TokenBudget() = default;
  // exa::Error when batch_tokens < seq_len or the range has no token.
  TokenBudget(const std::vector<std::int64_t>& starts, std::int64_t begin, std::int64_t end, std::int64_t seq_len,
              std::int64_t batch_tokens, std::uint64_t seed);

  const std::vector<std::int64_t>& lengths() const { return lengths_; }
  std::int64_t sequences_in(std::size_t bucket) const { return budget_ / lengths_[bucket]; }
  std::int64_t pieces_in(std::size_t bucket) const { return std::int64_t(bucket_[bucket].size()); }

  // Micro-batch m of step s: its shape, and its rows from `tokens`.
  BatchCounts shape(std::int64_t step, std::int64_t m) const;
  Batch batch(const TokenStore& tokens, std::int64_t step, std::int64_t m) const;

 private:
  struct Draw {
    std::size_t bucket;
    std::vector<std::int64_t> pieces;
  };
  Draw draw(std::int64_t step, std::int64_t m) const;

  std::int64_t T_ = 0, budget_ = 0;
  std::uint64_t seed_ = 0;
  std::vector<std::int64_t> lengths_;
  std::vector<std::vector<std::int64_t>> bucket_;  // piece indices per bucket
  std::vector<std::int64_t> mass_;                 // cumulative tokens over the buckets
  std::vector<DocumentPiece> pieces_;              // the split's documents, in order
};

}  // namespace exa::io
