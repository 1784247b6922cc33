#pragma once
// The fixed-point encoding of secure aggregation (comm/secure_aggregation.hpp):
// a value x becomes round(x * 2^24) as a 32-bit two's complement integer, and
// sums are taken mod 2^32. With n parties each value is clamped to
// |x| <= (2^31 - 1) / (n * 2^24) (42.7 for 3 parties), so the sum of n of them
// cannot wrap; the resolution is 2^-24 = 6.0e-8.
#include <cmath>
#include <cstdint>

namespace exa::comm {

constexpr int kFixedPointBits = 24;
constexpr double kFixedPointScale = double(1 << kFixedPointBits);

// The largest |x| that n parties' sum can hold.
inline double fixed_point_limit(int parties) { return (2147483647.0 / parties) / kFixedPointScale; }

// `*clamped` counts values that were outside the limit.
inline std::uint32_t encode_fixed(double x, int parties, std::int64_t* clamped = nullptr) {
  const double lim = fixed_point_limit(parties);
  if (!(std::fabs(x) <= lim)) {  // also NaN, which becomes 0
    if (clamped) ++*clamped;
    x = std::isnan(x) ? 0.0 : (x < 0 ? -lim : lim);
  }
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(std::llround(x * kFixedPointScale)));
}

inline double decode_fixed(std::uint32_t s) { return double(static_cast<std::int32_t>(s)) / kFixedPointScale; }

}  // namespace exa::comm
