#pragma once
// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// A draw is a pure function of (key, counter): no state is carried between
// draws, so element i of a tensor gets the same value whichever rank
// generates it and in whatever order. Parameter initialisation keys the
// generator with (seed, hash of the parameter's global name) and uses the
// global element index as the counter: every parallel layout therefore builds
// bit-identical models.
#include "core/kokkos_shims.hpp"

namespace exa {

struct PhiloxKey {
  std::uint32_t k0, k1;
};
struct PhiloxCounter {
  std::uint32_t c0, c1, c2, c3;
};

namespace philox_detail {
KOKKOS_FORCEINLINE_FUNCTION void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                         std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b);
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace philox_detail

KOKKOS_INLINE_FUNCTION PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_detail::mulhilo(M0, c.c0, hi0, lo0);
    philox_detail::mulhilo(M1, c.c2, hi1, lo1);
    c = PhiloxCounter{hi1 ^ c.c1 ^ k.k0, lo1, hi0 ^ c.c3 ^ k.k1, lo0};
    k.k0 += W0;
    k.k1 += W1;
  }
  return c;
}

// Uniform in (0, 1]: never 0, so log() is safe in Box-Muller.
KOKKOS_FORCEINLINE_FUNCTION double uniform_open0(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t m = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;  // 53 bits
  return (static_cast<double>(m) + 1.0) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `index` of stream `key` (Box-Muller on one
// Philox block; the second normal of the pair is discarded to keep the
// element -> draw map trivially layout-independent).
KOKKOS_INLINE_FUNCTION double philox_normal(PhiloxKey key, std::uint64_t index) {
  const PhiloxCounter c{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u,
                        0x4e6f726du /* "Norm" */};
  const PhiloxCounter r = philox4x32(c, key);
  const double u1 = uniform_open0(r.c0, r.c1);
  const double u2 = uniform_open0(r.c2, r.c3);
  return kx::sqrt(-2.0 * kx::log(u1)) * kx::cos(6.283185307179586 * u2);
}

KOKKOS_INLINE_FUNCTION double philox_uniform(PhiloxKey key, std::uint64_t index) {
  const PhiloxCounter c{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u,
                        0x556e6966u /* "Unif" */};
  const PhiloxCounter r = philox4x32(c, key);
  return uniform_open0(r.c0, r.c1);
}

// FNV-1a of a name, folded with the seed into a key. Host-only (names are
// host strings); the key is then passed to device code by value.
inline PhiloxKey philox_key(std::uint64_t seed, const char* name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char* p = name; *p; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 0x100000001b3ull;
  }
  h ^= seed * 0x9E3779B97F4A7C15ull;
  return PhiloxKey{static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

}  // namespace exa
