#pragma once
// Secure aggregation (Bonawitz et al., "Practical Secure Aggregation for
// Privacy-Preserving Machine Learning", CCS 2017), the honest-but-curious
// variant, as used by federated training (docs/federated.md): n parties each
// hold a vector x_u of 32-bit integers (comm/fixed_point.hpp); an aggregator
// learns sum_u x_u mod 2^32 over the parties that stayed, and nothing else.
//
// One round, per party u:
//   1. a fresh X25519 key pair (s_u, S_u) and a 32-byte self-mask seed b_u;
//      S_u is published;
//   2. s_u and b_u are Shamir-shared (comm/shamir.hpp) with the threshold t,
//      share v going to party v directly (never through the aggregator);
//   3. the masked vector y_u = x_u + PRG(b_u) + sum_{v > u} PRG(k_uv)
//      - sum_{v < u} PRG(k_uv) mod 2^32 goes to the aggregator, where k_uv
//      = BLAKE2b(X25519(s_u, S_v) | S_min | S_max) is the pair's key and PRG
//      ChaCha20 (libsodium) with the round as nonce;
//   4. the aggregator names the survivors (those whose y arrived); each
//      survivor v sends its share of b_u for every survivor u and of s_u for
//      every dropped u, never both for one party;
//   5. from t shares each, the aggregator rebuilds the survivors' b_u and the
//      dropped parties' s_u, subtracts the self-masks and the pair masks that
//      the dropped parties' vectors would have cancelled: what is left is
//      sum over the survivors of x_u, exactly.
// Fewer than t survivors: the round fails (exa::Error), nothing is revealed.
//
// This file is the protocol on messages, without a transport (tests drive it
// in one process); comm/secure_sum.hpp runs it over MPI. Without libsodium
// (EXAMOE_HAVE_SODIUM = 0) constructing a party throws, naming the package.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/shamir.hpp"

namespace exa::comm::secagg {

using Key = std::array<std::uint8_t, 32>;
struct Share {
  Key secret_key, self_seed;  // this recipient's shares of the sender's s_u and b_u
};

// Whether this build has libsodium (and hence secure aggregation), and the
// error that names the package and the fix when it has not.
bool available();
void require_available();

class Party {
 public:
  // Draws the round's keys, seed and share polynomials from `random`
  // (libsodium's randombytes when empty; tests give a fixed stream, so that
  // their statistics cannot fail by chance).
  Party(int id, int parties, int threshold, std::uint64_t round, shamir::RandomBytes random = {});
  int id() const { return id_; }
  const Key& public_key() const { return public_; }
  // Steps 1-2: the shares for every party (entry v goes to party v).
  std::vector<Share> shares() const;
  // Step 3: every party's public key (entry u is u's), then x -> y in place.
  void mask(std::uint32_t* x, std::size_t n, const std::vector<Key>& public_keys) const;
  // Step 4: kept[u] says whether u's vector arrived; `received[u]` is u's
  // share for this party. Entry u of the result is this party's share of
  // b_u (kept) or of s_u (dropped).
  std::vector<Key> unmask_shares(const std::vector<char>& kept, const std::vector<Share>& received) const;

 private:
  int id_, parties_, threshold_;
  std::uint64_t round_;
  shamir::RandomBytes random_;
  Key secret_{}, public_{}, seed_{};
};

// Step 5 at the aggregator: `sum` holds sum over the kept parties of y_u on
// entry and of x_u on return. shares[v][u] is survivor v's unmask share for
// party u (rows of dropped parties are ignored).
void unmask(std::uint32_t* sum, std::size_t n, std::uint64_t round, int threshold, const std::vector<char>& kept,
            const std::vector<Key>& public_keys, const std::vector<std::vector<Key>>& shares);

// The bytes one party sends and receives in a round without dropouts, for
// a vector of n values, as comm/secure_sum.hpp moves them: secure (public
// keys all-gathered, shares all-to-all, y to the aggregator, unmask shares
// to it, the sum back) against plain aggregation (x to the aggregator, the
// sum back), for a party or for the aggregator (which receives every vector
// and sends every sum). Their ratio is the communication expansion.
struct RoundBytes {
  std::int64_t secure = 0, plain = 0;
};
RoundBytes round_bytes(std::size_t n, int parties, bool aggregator);

}  // namespace exa::comm::secagg
