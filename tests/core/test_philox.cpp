// Philox-4x32-10 (core/philox.hpp): known-answer tests from the Random123
// distribution (kat_vectors, "philox4x32 10" lines) and the moments of the
// derived uniform and normal draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>

#include "core/philox.hpp"

using exa::PhiloxCounter;
using exa::PhiloxKey;

namespace {

void expect_block(const PhiloxCounter& got, std::uint32_t e0, std::uint32_t e1, std::uint32_t e2,
                  std::uint32_t e3) {
  EXPECT_EQ(got.c0, e0) << std::hex << "word 0: got 0x" << got.c0 << " want 0x" << e0;
  EXPECT_EQ(got.c1, e1) << std::hex << "word 1: got 0x" << got.c1 << " want 0x" << e1;
  EXPECT_EQ(got.c2, e2) << std::hex << "word 2: got 0x" << got.c2 << " want 0x" << e2;
  EXPECT_EQ(got.c3, e3) << std::hex << "word 3: got 0x" << got.c3 << " want 0x" << e3;
}

}  // namespace

// Random123 1.09, examples/kat_vectors:
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
TEST(Philox, KnownAnswerZeros) {
  expect_block(exa::philox4x32(PhiloxCounter{0u, 0u, 0u, 0u}, PhiloxKey{0u, 0u}), 0x6627e8d5u, 0xe169c58du,
               0xbc57ac4cu, 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnes) {
  const std::uint32_t f = 0xffffffffu;
  expect_block(exa::philox4x32(PhiloxCounter{f, f, f, f}, PhiloxKey{f, f}), 0x408f276du, 0x41c83b0eu,
               0xa20bc7c6u, 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPi) {
  expect_block(exa::philox4x32(PhiloxCounter{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                               PhiloxKey{0xa4093822u, 0x299f31d0u}),
               0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, PureFunctionOfKeyAndCounter) {
  const PhiloxKey k{0x12345678u, 0x9abcdef0u};
  const PhiloxCounter c{1u, 2u, 3u, 4u};
  const PhiloxCounter a = exa::philox4x32(c, k);
  const PhiloxCounter b = exa::philox4x32(c, k);
  expect_block(a, b.c0, b.c1, b.c2, b.c3);
  // Neighbouring counters and keys give unrelated blocks.
  const PhiloxCounter n = exa::philox4x32(PhiloxCounter{2u, 2u, 3u, 4u}, k);
  const PhiloxCounter m = exa::philox4x32(c, PhiloxKey{0x12345679u, 0x9abcdef0u});
  EXPECT_NE(a.c0, n.c0);
  EXPECT_NE(a.c0, m.c0);
}

TEST(Philox, UniformIsInOpenZeroClosedOne) {
  EXPECT_GT(exa::uniform_open0(0u, 0u), 0.0);
  EXPECT_EQ(exa::uniform_open0(0u, 0u), 1.0 / 9007199254740992.0);
  EXPECT_EQ(exa::uniform_open0(0xffffffffu, 0xffffffffu), 1.0);

  const PhiloxKey key = exa::philox_key(7, "uniform.test");
  const std::uint64_t n = 1u << 20;
  double s = 0, s2 = 0, lo = 2, hi = -1;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double u = exa::philox_uniform(key, i);
    s += u;
    s2 += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  std::printf("[philox] uniform: n=%llu mean %.6f (1/2) var %.6f (1/12=%.6f) min %.3g max %.9f\n",
              static_cast<unsigned long long>(n), mean, var, 1.0 / 12, lo, hi);
  EXPECT_GT(lo, 0.0);
  EXPECT_LE(hi, 1.0);
  // sd of the mean: sqrt(1/12/n); of the variance: sqrt(1/180/n). 6 sigma.
  EXPECT_NEAR(mean, 0.5, 6 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 6 * std::sqrt(1.0 / 180 / n));
}

TEST(Philox, NormalMoments) {
  const PhiloxKey key = exa::philox_key(1234, "layers.0.attn.wq.weight");
  const std::uint64_t n = 1u << 21;
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
  std::uint64_t within1 = 0, beyond3 = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double z = exa::philox_normal(key, i);
    ASSERT_TRUE(std::isfinite(z)) << "index " << i;
    m1 += z;
    m2 += z * z;
    m3 += z * z * z;
    m4 += z * z * z * z;
    within1 += std::fabs(z) < 1.0;
    beyond3 += std::fabs(z) > 3.0;
  }
  m1 /= n;
  m2 /= n;
  m3 /= n;
  m4 /= n;
  const double var = m2 - m1 * m1;
  const double p1 = double(within1) / n, p3 = double(beyond3) / n;
  std::printf(
      "[philox] normal: n=%llu mean %.5f var %.5f skew %.5f kurt %.5f P(|z|<1) %.5f (0.68269) P(|z|>3) "
      "%.6f (0.00270)\n",
      static_cast<unsigned long long>(n), m1, var, m3, m4, p1, p3);
  // Standard errors for N(0,1): mean 1/sqrt(n), var sqrt(2/n), E[z^3] sqrt(15/n),
  // E[z^4] sqrt(96/n). 6 sigma bounds: a correct generator fails ~never.
  const double rn = 1.0 / std::sqrt(double(n));
  EXPECT_NEAR(m1, 0.0, 6 * rn);
  EXPECT_NEAR(var, 1.0, 6 * std::sqrt(2.0) * rn);
  EXPECT_NEAR(m3, 0.0, 6 * std::sqrt(15.0) * rn);
  EXPECT_NEAR(m4, 3.0, 6 * std::sqrt(96.0) * rn);
  const double pa = 0.6826894921370859, pb = 0.0026997960632601866;
  EXPECT_NEAR(p1, pa, 6 * std::sqrt(pa * (1 - pa)) * rn);
  EXPECT_NEAR(p3, pb, 6 * std::sqrt(pb * (1 - pb)) * rn);
}

TEST(Philox, NormalNeighboursUncorrelated) {
  // Lag-1 correlation along the counter (consecutive elements of a tensor).
  const PhiloxKey key = exa::philox_key(99, "embed.weight");
  const std::uint64_t n = 1u << 20;
  double prev = exa::philox_normal(key, 0), c = 0;
  for (std::uint64_t i = 1; i <= n; ++i) {
    const double z = exa::philox_normal(key, i);
    c += prev * z;
    prev = z;
  }
  c /= n;
  std::printf("[philox] normal lag-1 correlation %.5f\n", c);
  EXPECT_NEAR(c, 0.0, 6.0 / std::sqrt(double(n)));
}

TEST(Philox, CounterHighWordMatters) {
  // Indices that differ only above bit 32 (tensors beyond 4G elements).
  const PhiloxKey key = exa::philox_key(5, "big");
  EXPECT_NE(exa::philox_normal(key, 3), exa::philox_normal(key, 3 + (std::uint64_t(1) << 32)));
  EXPECT_NE(exa::philox_uniform(key, 3), exa::philox_uniform(key, 3 + (std::uint64_t(1) << 32)));
}

TEST(Philox, KeysDependOnSeedAndName) {
  const PhiloxKey a = exa::philox_key(1, "layers.0.mlp.w1");
  const PhiloxKey b = exa::philox_key(1, "layers.0.mlp.w1");
  const PhiloxKey c = exa::philox_key(2, "layers.0.mlp.w1");
  const PhiloxKey d = exa::philox_key(1, "layers.0.mlp.w3");
  const PhiloxKey e = exa::philox_key(1, "layers.1.mlp.w1");
  EXPECT_EQ(a.k0, b.k0);
  EXPECT_EQ(a.k1, b.k1);
  auto key64 = [](PhiloxKey k) { return (std::uint64_t(k.k1) << 32) | k.k0; };
  std::set<std::uint64_t> keys{key64(a), key64(c), key64(d), key64(e)};
  EXPECT_EQ(keys.size(), 4u);
  // Seeds 0..999 for one name: all distinct keys.
  std::set<std::uint64_t> seeds;
  for (std::uint64_t s = 0; s < 1000; ++s) seeds.insert(key64(exa::philox_key(s, "norm.weight")));
  EXPECT_EQ(seeds.size(), 1000u);
}
