#pragma once
// TokenStore: a read-only array of tokens, whatever file they came from.
//
// Tokens stay in their file's width (1 byte for text, 2 or 4 for shards and
// HDF5) so a mapped shard is never expanded in memory; the sampler copies
// only the windows it needs, widening them to int32 on the way out. Values
// are decoded as little-endian bytes, which is the shard format's order and
// makes reads independent of the host's byte order.
#include <cstdint>
#include <memory>
#include <string>

namespace exa::io {

class TokenStore {
 public:
  TokenStore() = default;
  // `tokens` points at `count` tokens of `width` bytes (1, 2 or 4) that stay
  // valid while `keepalive` lives. `source` names the file in messages.
  TokenStore(std::shared_ptr<const unsigned char> keepalive, const unsigned char* tokens, int width, std::int64_t count,
             std::int64_t vocab, std::string source);

  std::int64_t size() const { return count_; }
  std::int64_t vocab() const { return vocab_; }
  int width() const { return width_; }
  const std::string& source() const { return source_; }

  std::uint32_t at(std::int64_t i) const {
    const unsigned char* p = tokens_ + static_cast<std::size_t>(i) * static_cast<std::size_t>(width_);
    switch (width_) {
      case 1:
        return p[0];
      case 2:
        return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8;
      default:
        return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
               static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    }
  }
  // Tokens [begin, begin + n) as int32 (what the embedding kernel indexes with).
  void copy(std::int64_t begin, std::int64_t n, std::int32_t* out) const;

  // Checks every token is below vocab(); the first one that is not is
  // reported as "<source>: token at position P is X, not below the vocabulary
  // size V; <fix>". Also computes fingerprint(). Readers call it once at open.
  void validate(const std::string& fix);
  // FNV-1a over the token values (not their width): the same tokens give the
  // same fingerprint from text, a uint16 or a uint32 shard, or HDF5, so a
  // checkpoint can tell whether a restart sees the data it was trained on.
  std::uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::shared_ptr<const unsigned char> keepalive_;
  const unsigned char* tokens_ = nullptr;
  int width_ = 1;
  std::int64_t count_ = 0, vocab_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::string source_;
};

}  // namespace exa::io
