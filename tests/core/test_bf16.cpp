// exa::bf16 scalar conversions (core/bf16.hpp): fp32 -> bf16 rounds to
// nearest, ties to even, like torch.Tensor.to(torch.bfloat16); bf16 -> fp32
// is exact. Checked on edge cases and against an independent reference that
// picks the nearer neighbour with exact double arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/bf16.hpp"

namespace {

float f_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t u_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
std::uint16_t rne(std::uint32_t u) { return exa::to_bf16(f_of(u)).bits; }

bool is_nan_bf16(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0u; }

// Reference: the two bf16 neighbours of a finite f (truncation toward zero
// and the next one away from zero, 2^128 standing in for overflow), chosen by
// exact distance in double; a tie goes to the even mantissa.
std::uint16_t reference_rne(std::uint32_t u) {
  const float f = f_of(u);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t mag = u & 0x7fffffffu;
  const std::uint16_t lo = static_cast<std::uint16_t>((sign | (mag & 0xffff0000u)) >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);  // next magnitude, same sign
  const double a = std::fabs(double(f));
  const double dlo = a - std::fabs(double(f_of(std::uint32_t(lo) << 16)));
  const double hi_mag =
      ((hi & 0x7f80u) == 0x7f80u) ? std::ldexp(1.0, 128) : std::fabs(double(f_of(std::uint32_t(hi) << 16)));
  const double dhi = hi_mag - a;
  std::uint16_t r;
  if (dlo < dhi) {
    r = lo;
  } else if (dhi < dlo) {
    r = hi;
  } else {
    r = (lo & 1u) ? hi : lo;
  }
  return r;  // hi past the largest finite bf16 is infinity of the right sign
}

}  // namespace

TEST(Bf16, ExactValuesAreUnchanged) {
  for (float f : {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 3.0f, -1.5f, 256.0f, 1.0f / 1024, 1.0078125f}) {
    EXPECT_EQ(exa::to_float(exa::to_bf16(f)), f) << f;
  }
  EXPECT_EQ(rne(0x3f800000u), 0x3f80u);
}

TEST(Bf16, TiesGoToEven) {
  // 1 + 2^-8 lies halfway between 0x3f80 (even) and 0x3f81: down.
  EXPECT_EQ(rne(0x3f808000u), 0x3f80u);
  // Halfway between 0x3f81 (odd) and 0x3f82 (even): up.
  EXPECT_EQ(rne(0x3f818000u), 0x3f82u);
  // Same for negative numbers (ties to even in magnitude).
  EXPECT_EQ(rne(0xbf808000u), 0xbf80u);
  EXPECT_EQ(rne(0xbf818000u), 0xbf82u);
  // A tie that carries into the exponent: 0x3fff (odd) + half -> 0x4000.
  EXPECT_EQ(rne(0x3fff8000u), 0x4000u);
  EXPECT_EQ(exa::to_float(exa::bf16::from_bits(0x4000u)), 2.0f);
}

TEST(Bf16, JustAboveAndBelowATie) {
  EXPECT_EQ(rne(0x3f808001u), 0x3f81u);  // above the tie: up, although even is below
  EXPECT_EQ(rne(0x3f807fffu), 0x3f80u);  // below the tie: down
  EXPECT_EQ(rne(0x3f817fffu), 0x3f81u);  // below the tie: down, although even is above
  EXPECT_EQ(rne(0x3f818001u), 0x3f82u);
  EXPECT_EQ(rne(0xbf808001u), 0xbf81u);
  EXPECT_EQ(rne(0xbf817fffu), 0xbf81u);
  // 0x3f80ffff is just below 1 + 2^-7: rounds up to it.
  EXPECT_EQ(exa::to_float(exa::to_bf16(f_of(0x3f80ffffu))), 1.0078125f);
}

TEST(Bf16, NanStaysNan) {
  const std::uint32_t nans[] = {
      0x7fc00000u,  // canonical quiet NaN
      0xffc00000u,  // negative quiet NaN
      0x7f800001u,  // signalling NaN, payload only in the low half
      0x7f80ffffu,  // payload only in the low half, would round up into exponent
      0xff800001u,  // negative, payload only in the low half
      0x7fffffffu,  // all ones: must not wrap around to zero
      0xffffffffu,
      0x7fbfffffu,  // signalling NaN, payload rounds up into the quiet bit
  };
  for (std::uint32_t u : nans) {
    const std::uint16_t b = rne(u);
    EXPECT_TRUE(is_nan_bf16(b)) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u << ": sign lost";
    EXPECT_TRUE(std::isnan(exa::to_float(exa::bf16::from_bits(b))));
  }
  EXPECT_TRUE(std::isnan(exa::to_float(exa::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(exa::to_float(exa::to_bf16(std::numeric_limits<float>::signaling_NaN()))));
}

TEST(Bf16, Infinities) {
  EXPECT_EQ(rne(0x7f800000u), 0x7f80u);
  EXPECT_EQ(rne(0xff800000u), 0xff80u);
  EXPECT_EQ(exa::to_float(exa::bf16::from_bits(0x7f80u)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exa::to_float(exa::bf16::from_bits(0xff80u)), -std::numeric_limits<float>::infinity());
}

TEST(Bf16, OverflowRoundsToInfinity) {
  // FLT_MAX is above max bf16 (0x7f7f) + half an ulp: rounds to infinity.
  EXPECT_EQ(rne(0x7f7fffffu), 0x7f80u);
  EXPECT_EQ(rne(0xff7fffffu), 0xff80u);
  // Exactly max bf16 + half an ulp is a tie with an odd mantissa: up, to inf.
  EXPECT_EQ(rne(0x7f7f8000u), 0x7f80u);
  // Just below that tie: max bf16.
  EXPECT_EQ(rne(0x7f7f7fffu), 0x7f7fu);
  EXPECT_EQ(rne(0xff7f7fffu), 0xff7fu);
  EXPECT_EQ(exa::to_float(exa::bf16::from_bits(0x7f7fu)), f_of(0x7f7f0000u));
}

TEST(Bf16, DenormalsAreKeptAndRounded) {
  // No flush to zero: a bf16 denormal converts exactly both ways.
  EXPECT_EQ(rne(0x00010000u), 0x0001u);
  EXPECT_EQ(u_of(exa::to_float(exa::bf16::from_bits(0x0001u))), 0x00010000u);
  EXPECT_EQ(rne(0x00000001u), 0x0000u);  // smallest fp32 denormal: to +0
  EXPECT_EQ(rne(0x80000001u), 0x8000u);  // ... and to -0
  EXPECT_EQ(rne(0x00008000u), 0x0000u);  // tie, even is 0
  EXPECT_EQ(rne(0x00008001u), 0x0001u);
  EXPECT_EQ(rne(0x00018000u), 0x0002u);  // tie, odd below: up
  EXPECT_EQ(rne(0x007fffffu), 0x0080u);  // largest denormal rounds up to the smallest normal
  EXPECT_EQ(rne(0x807f7fffu), 0x807fu);
}

TEST(Bf16, SignedZero) {
  EXPECT_EQ(rne(0x00000000u), 0x0000u);
  EXPECT_EQ(rne(0x80000000u), 0x8000u);
  const float nz = exa::to_float(exa::to_bf16(-0.0f));
  EXPECT_EQ(nz, 0.0f);
  EXPECT_TRUE(std::signbit(nz));
}

TEST(Bf16, EveryBf16RoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const exa::bf16 h = exa::bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = exa::to_float(h);
    ASSERT_EQ(u_of(f), b << 16);
    const std::uint16_t back = exa::to_bf16(f).bits;
    if (is_nan_bf16(static_cast<std::uint16_t>(b))) {
      ASSERT_TRUE(is_nan_bf16(back)) << std::hex << b;
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

TEST(Bf16, MatchesReferenceOnSampledBitPatterns) {
  // Every 2^16-block of fp32 patterns is probed at its low-half values that
  // matter (0, 1, tie-1, tie, tie+1, max) plus a pseudo-random one.
  std::uint64_t checked = 0, s = 0x243f6a8885a308d3ull;
  auto check = [&](std::uint32_t u) {
    const std::uint32_t e = u & 0x7f800000u;
    if (e == 0x7f800000u) return;  // inf/NaN have their own tests
    const std::uint16_t got = rne(u), want = reference_rne(u);
    ASSERT_EQ(got, want) << std::hex << "pattern 0x" << u << " value " << f_of(u);
    ++checked;
  };
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi) {
    const std::uint32_t base = hi << 16;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu,
                             static_cast<std::uint32_t>(s >> 48)}) {
      check(base | lo);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("[bf16] %llu fp32 patterns match the reference rounding\n",
              static_cast<unsigned long long>(checked));
}

TEST(Bf16, RelativeErrorAtMostHalfUlp) {
  // |to_float(to_bf16(x)) - x| <= 2^-8 |x| (unit roundoff of an 8-bit
  // significand) for normal x in range.
  std::uint64_t s = 1;
  double worst = 0;
  for (int i = 0; i < 1000000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint32_t u = static_cast<std::uint32_t>(s >> 32);
    const std::uint32_t e = (u >> 23) & 0xffu;
    if (e == 0 || e >= 0xfe) continue;
    const float x = f_of(u);
    const double r = std::fabs(double(exa::to_float(exa::to_bf16(x))) - double(x)) / std::fabs(double(x));
    worst = std::max(worst, r);
  }
  std::printf("[bf16] worst relative rounding error %.6e (bound 2^-8 = %.6e)\n", worst, std::ldexp(1.0, -8));
  EXPECT_LE(worst, std::ldexp(1.0, -8));
}
