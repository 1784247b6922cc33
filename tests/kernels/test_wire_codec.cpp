// The compressed wire formats of the gradient collectives
// (kernels/wire_codec.hpp): payload sizes, round trips within the stated
// bounds (bf16: 2^-8 relative; int8: half the block's scale max|x|/127),
// decoding a prefix, add_into, deterministic words, and stochastic
// rounding: unbiased over many keys where rounding to nearest is not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "harness/host_views.hpp"
#include "kernels/wire_codec.hpp"

using exa::View1;
using exa::test::to_device;
using exa::test::to_host;
using exa::kernels::WireCodec;
using exa::kernels::WireFormat;

namespace {

// n values of several magnitudes and both signs, with a run of zeros.
std::vector<float> sample(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double t = std::sin(0.37 * double(i) + 0.1) * std::pow(10.0, double(i % 7) - 3.0);
    x[std::size_t(i)] = (i >= 40 && i < 60) ? 0.0f : float(t);
  }
  return x;
}

std::vector<float> round_trip(const WireCodec& c, const std::vector<float>& x, std::int64_t prefix = -1,
                              exa::PhiloxKey key = {0, 0}) {
  const auto n = std::int64_t(x.size());
  View1<std::int32_t> w("w", std::size_t(c.words(n)));
  c.encode(to_device(x), w, key);
  View1<float> y("y", std::size_t(prefix < 0 ? n : prefix));
  c.decode(w, n, y);
  return to_host(y);
}

}  // namespace

TEST(WireCodec, PayloadWords) {
  EXPECT_EQ(WireCodec(WireFormat::F32).words(1000), 1000);
  EXPECT_EQ(WireCodec(WireFormat::BF16).words(1001), 501);
  // 4 scales for 1000 values in blocks of 256, then 250 words of bytes.
  EXPECT_EQ(WireCodec(WireFormat::Int8, 256).words(1000), 4 + 250);
  EXPECT_EQ(WireCodec(WireFormat::Int8, 256).words(1), 2);
}

TEST(WireCodec, Bf16RoundTripWithinHalfAnUlp) {
  const auto x = sample(1001);  // odd: the last word holds one value
  const auto y = round_trip(WireCodec(WireFormat::BF16), x);
  // Round to nearest: within half a bf16 ulp (2^-8 of the leading power of
  // two), and unbiased (the signed errors average out).
  double bias = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 0.0f) continue;
    const float ulp = std::ldexp(1.0f, std::ilogb(x[i]) - 7);
    EXPECT_LE(std::abs(y[i] - x[i]), 0.5f * ulp) << i;
    bias += (double(y[i]) - double(x[i])) / ulp;
  }
  EXPECT_LT(std::abs(bias / double(x.size())), 0.05);
}

TEST(WireCodec, Int8RoundTripWithinHalfTheBlockScale) {
  for (const std::int64_t Q : {256, 100, 3}) {
    const WireCodec c(WireFormat::Int8, Q);
    const auto x = sample(1000);
    const auto y = round_trip(c, x);
    for (std::size_t b = 0; b * std::size_t(Q) < x.size(); ++b) {
      const std::size_t lo = b * std::size_t(Q), hi = std::min(x.size(), lo + std::size_t(Q));
      float m = 0;
      for (std::size_t i = lo; i < hi; ++i) m = std::max(m, std::abs(x[i]));
      const float s = m / 127.0f;
      for (std::size_t i = lo; i < hi; ++i) {
        // Half a step, plus the rounding of x * 127/max (a few float ulps of 127 steps).
        EXPECT_LE(std::abs(y[i] - x[i]), s * (0.5f + 127 * 4 * 0x1p-24f)) << "Q " << Q << " i " << i;
        if (x[i] == 0.0f) EXPECT_EQ(y[i], 0.0f);
      }
    }
  }
}

TEST(WireCodec, PrefixDecodesAndAccumulates) {
  for (const auto f : {WireFormat::F32, WireFormat::BF16, WireFormat::Int8}) {
    const WireCodec c(f, 64);
    const auto x = sample(300);
    const auto whole = round_trip(c, x);
    const auto prefix = round_trip(c, x, 77);
    for (std::size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i], whole[i]);
    // add_into: twice the decoded values, exactly.
    View1<std::int32_t> w("w", std::size_t(c.words(300)));
    c.encode(to_device(x), w);
    View1<float> y("y", 300), d("d", 300);
    c.decode(w, 300, y);
    c.decode(w, 300, d);
    exa::kernels::add_into(y, d);
    const auto twice = to_host(y);
    for (std::size_t i = 0; i < twice.size(); ++i) EXPECT_EQ(twice[i], 2 * whole[i]);
  }
}

TEST(WireCodec, SameInputSameWords) {
  for (const auto f : {WireFormat::BF16, WireFormat::Int8}) {
    const WireCodec c(f, 256);
    const auto x = sample(777);  // int8: a last word with unused bytes
    View1<std::int32_t> a("a", std::size_t(c.words(777))), b("b", std::size_t(c.words(777)));
    Kokkos::deep_copy(b, -1);
    c.encode(to_device(x), a);
    c.encode(to_device(x), b);
    EXPECT_EQ(to_host(a), to_host(b));
  }
}

TEST(WireCodec, NamesAreTheDecksValues) {
  EXPECT_EQ(exa::kernels::wire_format_from_name("int8"), WireFormat::Int8);
  EXPECT_STREQ(exa::kernels::wire_format_name(WireFormat::BF16), "bf16");
  EXPECT_THROW(exa::kernels::wire_format_from_name("fp8"), exa::Error);
}

// Stochastic rounding: every draw is one of the two neighbours of x (within
// one quantum), and the mean over 4096 keys is within 0.03 quanta of x (4
// standard deviations of the mean of 4096 draws),
// where rounding to nearest is off by 0.3 quanta (the control: values at
// 0.3 of a quantum above a grid point).
TEST(WireCodec, StochasticRoundingIsUnbiased) {
  constexpr int kKeys = 4096;
  for (const auto f : {WireFormat::BF16, WireFormat::Int8}) {
    const WireCodec sr(f, 8, true), nearest(f, 8);
    EXPECT_TRUE(sr.stochastic());
    // Grid points q * quantum plus 0.3 quantum: int8 blocks of 8 with
    // max |x| = 127 (quantum 1); bf16 values in [1, 2) (quantum 2^-7).
    std::vector<float> x;
    for (int i = 0; i < 16; ++i) {
      if (f == WireFormat::Int8) x.push_back(i % 8 == 0 ? 127.0f : float(i * 7 - 50) + 0.3f);
      else x.push_back(1.0f + float(i) / 128.0f + 0.3f / 128.0f);
    }
    const double quantum = f == WireFormat::Int8 ? 1.0 : 1.0 / 128.0;
    std::vector<double> mean(x.size(), 0.0);
    for (int k = 0; k < kKeys; ++k) {
      const auto y = round_trip(sr, x, -1, {std::uint32_t(k), 0x5eedu});
      for (std::size_t i = 0; i < x.size(); ++i) {
        EXPECT_LT(std::fabs(double(y[i]) - double(x[i])), quantum * 1.0001) << "value " << i << ", key " << k;
        mean[i] += double(y[i]) / kKeys;
      }
    }
    const auto near = round_trip(nearest, x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (f == WireFormat::Int8 && i % 8 == 0) continue;  // the block's max is exact
      EXPECT_LE(std::fabs(mean[i] - double(x[i])), 0.03 * quantum) << exa::kernels::wire_format_name(f) << " value "
                                                                    << i;
      EXPECT_GE(std::fabs(double(near[i]) - double(x[i])), 0.25 * quantum) << "the control shows no bias";
    }
    // The same key gives the same words; another key other words.
    EXPECT_EQ(round_trip(sr, x, -1, {7, 9}), round_trip(sr, x, -1, {7, 9}));
    EXPECT_NE(round_trip(sr, x, -1, {7, 9}), round_trip(sr, x, -1, {8, 9}));
  }
}
