#include "comm/secure_aggregation.hpp"

#include <algorithm>
#include <cstring>

#include "comm/shamir.hpp"
#include "core/error.hpp"

#if EXAMOE_HAVE_SODIUM
#include <sodium.h>
#endif

namespace exa::comm::secagg {

#if EXAMOE_HAVE_SODIUM
namespace {

void init_sodium() {
  static const int rc = sodium_init();
  EXA_REQUIRE(rc >= 0, "secure aggregation: libsodium failed to initialise (sodium_init returned {})", rc);
}

void random_bytes(std::uint8_t* p, std::size_t n) { randombytes_buf(p, n); }

// The pair's mask key: both ends compute the same from their own secret and
// the other's public key.
Key pair_key(const Key& secret, const Key& mine, const Key& theirs) {
  std::uint8_t shared[crypto_scalarmult_BYTES];
  EXA_REQUIRE(crypto_scalarmult(shared, secret.data(), theirs.data()) == 0,
              "secure aggregation: a site's public key is a low-order point (a corrupt key exchange)");
  const bool mine_first = std::lexicographical_compare(mine.begin(), mine.end(), theirs.begin(), theirs.end());
  const Key& lo = mine_first ? mine : theirs;
  const Key& hi = mine_first ? theirs : mine;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 32);
  crypto_generichash_update(&st, shared, sizeof shared);
  crypto_generichash_update(&st, lo.data(), lo.size());
  crypto_generichash_update(&st, hi.data(), hi.size());
  Key k;
  crypto_generichash_final(&st, k.data(), k.size());
  sodium_memzero(shared, sizeof shared);
  return k;
}

// x += sign * PRG(key, round) mod 2^32, the stream in 64 KiB pieces
// (ChaCha20's block counter continues across them).
void add_stream(std::uint32_t* x, std::size_t n, const Key& key, std::uint64_t round, bool subtract) {
  std::uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
  for (std::size_t i = 0; i < sizeof nonce; ++i) nonce[i] = std::uint8_t(round >> (8 * i));
  constexpr std::size_t kWords = 16384;  // 1024 ChaCha20 blocks of 64 bytes
  std::vector<std::uint8_t> zeros(kWords * 4, 0), bytes(kWords * 4);
  for (std::size_t at = 0, block = 0; at < n; at += kWords, block += kWords * 4 / 64) {
    const std::size_t m = std::min(kWords, n - at);
    crypto_stream_chacha20_xor_ic(bytes.data(), zeros.data(), m * 4, nonce, block, key.data());
    for (std::size_t i = 0; i < m; ++i) {
      const std::uint32_t w = std::uint32_t(bytes[4 * i]) | std::uint32_t(bytes[4 * i + 1]) << 8 |
                              std::uint32_t(bytes[4 * i + 2]) << 16 | std::uint32_t(bytes[4 * i + 3]) << 24;
      x[at + i] = subtract ? x[at + i] - w : x[at + i] + w;
    }
  }
}

Key rebuild(int u, const std::vector<char>& kept, const std::vector<std::vector<Key>>& shares, int threshold,
            const char* what) {
  std::vector<int> ids;
  std::vector<shamir::Bytes> parts;
  for (std::size_t v = 0; v < kept.size() && int(ids.size()) < threshold; ++v) {
    if (!kept[v]) continue;
    ids.push_back(int(v));
    parts.emplace_back(shares[v][std::size_t(u)].begin(), shares[v][std::size_t(u)].end());
  }
  EXA_REQUIRE(int(ids.size()) >= threshold,
              "secure aggregation: {} of {} sites survived the round, fewer than federated.threshold = {}: site {}'s "
              "{} cannot be rebuilt, so the sum cannot be unmasked (the round is lost, nothing is revealed)",
              ids.size(), kept.size(), threshold, u, what);
  const auto bytes = shamir::reconstruct(ids, parts);
  Key k;
  std::copy(bytes.begin(), bytes.end(), k.begin());
  return k;
}

}  // namespace

bool available() { return true; }

Party::Party(int id, int parties, int threshold, std::uint64_t round, shamir::RandomBytes random)
    : id_(id), parties_(parties), threshold_(threshold), round_(round), random_(std::move(random)) {
  init_sodium();
  if (!random_) random_ = random_bytes;
  EXA_REQUIRE(parties >= 2 && id >= 0 && id < parties && threshold >= 1 && threshold <= parties,
              "secure aggregation: party {} of {} with threshold {} (need 2 <= parties, 1 <= threshold <= parties)",
              id, parties, threshold);
  random_(secret_.data(), secret_.size());
  crypto_scalarmult_base(public_.data(), secret_.data());
  random_(seed_.data(), seed_.size());
}

std::vector<Share> Party::shares() const {
  const auto s = shamir::split(shamir::Bytes(secret_.begin(), secret_.end()), parties_, threshold_, random_);
  const auto b = shamir::split(shamir::Bytes(seed_.begin(), seed_.end()), parties_, threshold_, random_);
  std::vector<Share> out(static_cast<std::size_t>(parties_));
  for (std::size_t v = 0; v < out.size(); ++v) {
    std::copy(s[v].begin(), s[v].end(), out[v].secret_key.begin());
    std::copy(b[v].begin(), b[v].end(), out[v].self_seed.begin());
  }
  return out;
}

void Party::mask(std::uint32_t* x, std::size_t n, const std::vector<Key>& public_keys) const {
  EXA_REQUIRE(int(public_keys.size()) == parties_ && public_keys[std::size_t(id_)] == public_,
              "secure aggregation: party {} got {} public keys, or not its own", id_, public_keys.size());
  add_stream(x, n, seed_, round_, false);
  for (int v = 0; v < parties_; ++v) {
    if (v == id_) continue;
    add_stream(x, n, pair_key(secret_, public_, public_keys[std::size_t(v)]), round_, /*subtract=*/v < id_);
  }
}

std::vector<Key> Party::unmask_shares(const std::vector<char>& kept, const std::vector<Share>& received) const {
  EXA_REQUIRE(int(kept.size()) == parties_ && int(received.size()) == parties_,
              "secure aggregation: {} survivor flags and {} shares for {} parties", kept.size(), received.size(),
              parties_);
  std::vector<Key> out(static_cast<std::size_t>(parties_));
  for (std::size_t u = 0; u < out.size(); ++u) out[u] = kept[u] ? received[u].self_seed : received[u].secret_key;
  return out;
}

void unmask(std::uint32_t* sum, std::size_t n, std::uint64_t round, int threshold, const std::vector<char>& kept,
            const std::vector<Key>& public_keys, const std::vector<std::vector<Key>>& shares) {
  init_sodium();
  const int parties = int(kept.size());
  for (int u = 0; u < parties; ++u) {
    if (kept[std::size_t(u)]) {
      add_stream(sum, n, rebuild(u, kept, shares, threshold, "self-mask seed"), round, /*subtract=*/true);
      continue;
    }
    const Key s = rebuild(u, kept, shares, threshold, "secret key");
    Key check;
    crypto_scalarmult_base(check.data(), s.data());
    EXA_REQUIRE(check == public_keys[std::size_t(u)],
                "secure aggregation: the shares of dropped site {}'s key do not rebuild its public key (a survivor "
                "sent a wrong share)",
                u);
    // Survivor v added +PRG(k_vu) when v < u and -PRG(k_vu) when v > u;
    // u's vector, which would have cancelled it, never came.
    for (int v = 0; v < parties; ++v)
      if (kept[std::size_t(v)])
        add_stream(sum, n, pair_key(s, public_keys[std::size_t(u)], public_keys[std::size_t(v)]), round,
                   /*subtract=*/v < u);
  }
}

#else

bool available() { return false; }

Party::Party(int, int, int, std::uint64_t, shamir::RandomBytes) { require_available(); }
std::vector<Share> Party::shares() const { return {}; }
void Party::mask(std::uint32_t*, std::size_t, const std::vector<Key>&) const {}
std::vector<Key> Party::unmask_shares(const std::vector<char>&, const std::vector<Share>&) const { return {}; }
void unmask(std::uint32_t*, std::size_t, std::uint64_t, int, const std::vector<char>&, const std::vector<Key>&,
            const std::vector<std::vector<Key>>&) {
  require_available();
}

#endif

void require_available() {
  EXA_REQUIRE(available(),
              "federated.secure = true needs libsodium, which this build lacks (Debian: libsodium-dev; Spack: "
              "libsodium); install it and reconfigure, or set federated.secure = false");
}

RoundBytes round_bytes(std::size_t n, int parties, bool aggregator) {
  const std::int64_t p = parties, vec = std::int64_t(n) * 4;
  RoundBytes b;
  // A party's vector out and the sum in; the aggregator takes the p - 1
  // others' vectors in and sends the sum out to each.
  b.plain = aggregator ? 2 * vec * (p - 1) : 2 * vec;
  // Plus: its public key out and the others' in, its shares out and theirs
  // in (64 bytes each), and the unmask shares (32 bytes per party) out, or
  // at the aggregator in from the p - 1 others.
  b.secure = b.plain + 32 * p + 2 * 64 * (p - 1) + (aggregator ? 32 * p * (p - 1) : 32 * p);
  return b;
}

}  // namespace exa::comm::secagg
