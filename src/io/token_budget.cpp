#include "io/token_budget.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/length_buckets.hpp"
#include "core/philox.hpp"
#include "io/sampler.hpp"

namespace exa::io {

namespace {

std::uint64_t draw64(PhiloxKey key, std::int64_t step, std::int64_t m, std::int64_t i) {
  const auto s = static_cast<std::uint64_t>(step);
  const PhiloxCounter r = philox4x32(
      PhiloxCounter{static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(s),
                    static_cast<std::uint32_t>(s >> 32)},
      key);
  return static_cast<std::uint64_t>(r.c0) | static_cast<std::uint64_t>(r.c1) << 32;
}

}  // namespace

TokenBudget::TokenBudget(const std::vector<std::int64_t>& starts, std::int64_t begin, std::int64_t end,
                         std::int64_t seq_len, std::int64_t batch_tokens, std::uint64_t seed)
    : T_(seq_len), budget_(batch_tokens), seed_(seed), lengths_(length_buckets(seq_len)) {
  EXA_REQUIRE(batch_tokens >= seq_len,
              "train.batch_tokens = {} is less than model.seq_len = {}: a micro-batch must hold at least one whole "
              "sequence; set train.batch_tokens >= {}",
              batch_tokens, seq_len, seq_len);
  EXA_REQUIRE(end > begin && !starts.empty() && starts.front() == 0,
              "dynamic batching: no documents in the token range [{}, {})", begin, end);
  bucket_.resize(lengths_.size());
  std::vector<std::int64_t> tokens(lengths_.size(), 0);
  pieces_ = document_pieces(starts, begin, end, seq_len);
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const std::int64_t n = pieces_[i].len;
    std::size_t k = lengths_.size() - 1;
    while (lengths_[k] < n) --k;  // the shortest bucket that holds it
    bucket_[k].push_back(std::int64_t(i));
    tokens[k] += n;
  }
  std::int64_t sum = 0;
  for (std::size_t k = 0; k < lengths_.size(); ++k) mass_.push_back(sum += tokens[k]);
}

TokenBudget::Draw TokenBudget::draw(std::int64_t step, std::int64_t m) const {
  EXA_ASSERT(step >= 0 && m >= 0);
  const PhiloxKey key = philox_key(seed_, "examoe.data.budget");
  const std::uint64_t u = draw64(key, step, m, 0) % static_cast<std::uint64_t>(mass_.back());
  std::size_t k = 0;
  while (static_cast<std::uint64_t>(mass_[k]) <= u) ++k;
  Draw d{k, {}};
  const auto& b = bucket_[k];
  const std::int64_t n = sequences_in(k);
  for (std::int64_t i = 0; i < n; ++i)
    d.pieces.push_back(b[std::size_t(draw64(key, step, m, i + 1) % static_cast<std::uint64_t>(b.size()))]);
  return d;
}

BatchCounts TokenBudget::shape(std::int64_t step, std::int64_t m) const {
  const Draw d = draw(step, m);
  BatchCounts s{std::int64_t(d.pieces.size()), lengths_[d.bucket], 0, 0};
  for (const std::int64_t p : d.pieces) {
    s.tokens += pieces_[std::size_t(p)].len;
    s.targets += pieces_[std::size_t(p)].targets();
  }
  return s;
}

Batch TokenBudget::batch(const TokenStore& tokens, std::int64_t step, std::int64_t m) const {
  const Draw d = draw(step, m);
  const std::int64_t L = lengths_[d.bucket], B = std::int64_t(d.pieces.size());
  Batch b{B, L, std::vector<std::int32_t>(std::size_t(B * L), 0), std::vector<std::int32_t>(std::size_t(B * L), -1)};
  for (std::int64_t r = 0; r < B; ++r)
    piece_rows(tokens, pieces_[std::size_t(d.pieces[std::size_t(r)])], b.inputs.data() + r * L,
               b.targets.data() + r * L);
  return b;
}

}  // namespace exa::io
