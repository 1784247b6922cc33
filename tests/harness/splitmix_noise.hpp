#pragma once
// Deterministic test data: a value in [-0.5, 0.5) per (seed, element),
// from splitmix64, the same on every rank and backend.
#include <cstdint>

namespace exa::test {

inline double splitmix_noise(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 53) - 0.5;
}

}  // namespace exa::test
