#include "io/token_store.hpp"

#include <utility>

#include "core/error.hpp"

namespace exa::io {

TokenStore::TokenStore(std::shared_ptr<const unsigned char> keepalive, const unsigned char* tokens, int width,
                       std::int64_t count, std::int64_t vocab, std::string source)
    : keepalive_(std::move(keepalive)),
      tokens_(tokens),
      width_(width),
      count_(count),
      vocab_(vocab),
      source_(std::move(source)) {
  EXA_ASSERT(width == 1 || width == 2 || width == 4);
  EXA_ASSERT(count >= 0 && vocab > 0);
}

void TokenStore::copy(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  EXA_ASSERT(begin >= 0 && n >= 0 && begin + n <= count_);
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(at(begin + i));
}

void TokenStore::validate(const std::string& fix) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto v = static_cast<std::uint64_t>(vocab_);
  for (std::int64_t i = 0; i < count_; ++i) {
    const std::uint32_t t = at(i);
    EXA_REQUIRE(t < v, "{}: token at position {} is {}, not below the vocabulary size {}; {}", source_, i, t, vocab_,
                fix);
    for (int b = 0; b < 4; ++b) {
      h ^= (t >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  fingerprint_ = h;
}

}  // namespace exa::io
