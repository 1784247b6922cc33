#pragma once
// Shamir secret sharing of byte strings over GF(2^8) (one polynomial per
// byte, AES field polynomial x^8 + x^4 + x^3 + x + 1): any `threshold` of
// the `n` shares give the secret back, fewer reveal nothing about it.
// Secure aggregation (comm/secure_aggregation.hpp) shares each site's mask
// secrets this way, so that the survivors can remove a dropped site's masks.
// Share i belongs to evaluation point x = i + 1 (x = 0 is the secret).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace exa::comm::shamir {

using Bytes = std::vector<std::uint8_t>;
// Fills `n` bytes with secret randomness (libsodium's randombytes_buf in
// the protocol; a fixed stream in tests).
using RandomBytes = std::function<void(std::uint8_t*, std::size_t)>;

// n shares of `secret`, any `threshold` of which reconstruct it
// (1 <= threshold <= n <= 255).
std::vector<Bytes> split(const Bytes& secret, int n, int threshold, const RandomBytes& random);

// The secret from shares of the parties `ids` (0-based, distinct), as many
// as the threshold or more; all shares the same length.
Bytes reconstruct(const std::vector<int>& ids, const std::vector<Bytes>& shares);

}  // namespace exa::comm::shamir
