// Top-k sparsification with error feedback (kernels/topk_codec.hpp):
// payload sizes; the kept values are the largest of x + residual and the
// residual is the rest, exactly; ratio 1 sends every value unchanged;
// error feedback loses nothing over many steps (sum of what was sent plus
// the last residual equals the sum of the gradients, exactly, on values
// whose sums are exact in fp32); NaN is always sent; deterministic words,
// equal to a stable sort's selection on values full of ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "harness/host_views.hpp"
#include "kernels/topk_codec.hpp"

using exa::View1;
using exa::kernels::TopkCodec;
using exa::test::to_device;
using exa::test::to_host;

namespace {

// Distinct magnitudes, both signs.
std::vector<float> sample(std::int64_t n, int seed = 0) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = float(std::sin(0.37 * double(i) + seed) * (1.0 + 1e-3 * double(i)));
  return x;
}

struct Sent {
  std::vector<float> dense;     // decode_add of the payload into zeros
  std::vector<float> residual;  // after encode
  std::vector<std::int32_t> words;
};

Sent send(const TopkCodec& c, const std::vector<float>& x, const std::vector<float>& residual) {
  const auto n = std::int64_t(x.size());
  View1<std::int32_t> w("w", std::size_t(c.words(n)));
  View1<float> r = to_device(residual);
  c.encode(to_device(x), r, w);
  View1<float> y("y", std::size_t(n));
  c.decode_add(w, n, y);
  return Sent{to_host(y), to_host(r), to_host(w)};
}

}  // namespace

TEST(TopkCodec, PayloadWords) {
  // 100 of 1000 values: 100 value words and 50 words of 16-bit offsets.
  EXPECT_EQ(TopkCodec(0.1).kept(1000), 100);
  EXPECT_EQ(TopkCodec(0.1).words(1000), 150);
  // Per segment of 65536: ceil(655.36) = 656, then 1 of the last 10.
  const std::int64_t n = TopkCodec::kSegment + 10;
  EXPECT_EQ(TopkCodec(0.01).kept(n), 657);
  EXPECT_EQ(TopkCodec(0.01).words(n), 656 + 328 + 1 + 1);
  EXPECT_EQ(TopkCodec(1.0).kept(n), n);
  EXPECT_EQ(TopkCodec(1e-9).kept(3), 1);  // at least one value a segment
  EXPECT_THROW(TopkCodec(0.0), exa::Error);
  EXPECT_THROW(TopkCodec(1.5), exa::Error);
}

TEST(TopkCodec, KeepsTheLargestAndOwesTheRestExactly) {
  const std::int64_t n = 3000;
  const TopkCodec c(0.05);
  const auto x = sample(n), r0 = sample(n, 7);
  const auto s = send(c, x, r0);
  std::vector<float> a(x.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = x[i] + r0[i];
  std::int64_t kept = 0;
  float smallest_kept = std::numeric_limits<float>::infinity(), largest_left = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Sent plus owed is a, bit for bit: one of the two is a, the other 0.
    EXPECT_EQ(s.dense[i] + s.residual[i], a[i]) << i;
    EXPECT_TRUE(s.dense[i] == 0.0f || s.residual[i] == 0.0f) << i;
    if (s.dense[i] != 0.0f) {
      ++kept;
      smallest_kept = std::min(smallest_kept, std::fabs(a[i]));
    } else {
      largest_left = std::max(largest_left, std::fabs(a[i]));
    }
  }
  EXPECT_EQ(kept, c.kept(n));
  EXPECT_GT(smallest_kept, largest_left);
}

TEST(TopkCodec, RatioOneSendsEveryValueUnchanged) {
  const std::int64_t n = TopkCodec::kSegment + 123;  // two segments
  const auto x = sample(n);
  const auto s = send(TopkCodec(1.0), x, std::vector<float>(std::size_t(n), 0.0f));
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(s.dense[std::size_t(i)], x[std::size_t(i)]) << i;
    ASSERT_EQ(s.residual[std::size_t(i)], 0.0f) << i;
  }
}

TEST(TopkCodec, ErrorFeedbackLosesNothingOverSteps) {
  // Gradients that are multiples of 1/64 below 2^10: every partial sum is
  // exact in fp32, so the identity holds bit for bit.
  const std::int64_t n = 777, steps = 25;
  const TopkCodec c(0.03);
  std::vector<float> residual(std::size_t(n), 0.0f), sent_sum(std::size_t(n), 0.0f), true_sum(std::size_t(n), 0.0f);
  for (std::int64_t t = 0; t < steps; ++t) {
    std::vector<float> g(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      g[std::size_t(i)] = float(((i * 37 + t * 101) % 129) - 64) / 64.0f;
    const auto s = send(c, g, residual);
    residual = s.residual;
    for (std::int64_t i = 0; i < n; ++i) {
      sent_sum[std::size_t(i)] += s.dense[std::size_t(i)];
      true_sum[std::size_t(i)] += g[std::size_t(i)];
    }
  }
  std::int64_t owed = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(sent_sum[std::size_t(i)] + residual[std::size_t(i)], true_sum[std::size_t(i)]) << i;
    owed += residual[std::size_t(i)] != 0.0f;
  }
  EXPECT_GT(owed, 0);  // the identity is not vacuous: something is still owed
}

TEST(TopkCodec, NanIsAlwaysSent) {
  auto x = sample(500);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  const auto s = send(TopkCodec(0.01), x, std::vector<float>(x.size(), 0.0f));
  EXPECT_TRUE(std::isnan(s.dense[17]));
  EXPECT_EQ(s.residual[17], 0.0f);
}

TEST(TopkCodec, TiesGoToTheLowerIndexAndWordsAreDeterministic) {
  std::vector<float> x(100, 1.0f);
  x[50] = -1.0f;
  const auto s = send(TopkCodec(0.05), x, std::vector<float>(x.size(), 0.0f));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(s.dense[i] != 0.0f, i < 5) << i;
  const auto again = send(TopkCodec(0.05), x, std::vector<float>(x.size(), 0.0f));
  EXPECT_EQ(s.words, again.words);
}

TEST(TopkCodec, DecodesAPrefixOfAPaddedPayload) {
  auto x = sample(64);
  for (std::size_t i = 40; i < x.size(); ++i) x[i] = 0.0f;  // padding
  const TopkCodec c(0.25);
  View1<std::int32_t> w("w", std::size_t(c.words(64)));
  View1<float> r("r", 64);
  c.encode(to_device(x), r, w);
  View1<float> y("y", 40);
  c.decode_add(w, 64, y);
  const auto full = send(c, x, std::vector<float>(x.size(), 0.0f)).dense;
  const auto got = to_host(y);
  for (std::size_t i = 0; i < 40; ++i) EXPECT_EQ(got[i], full[i]) << i;
}

namespace {

// The words the format's definition gives: per segment, a stable sort of
// the indices by magnitude (NaN as +inf), descending, the first k taken in
// ascending index order, values then 16-bit offsets.
std::vector<std::int32_t> reference_words(const TopkCodec& c, const std::vector<float>& a) {
  std::vector<std::int32_t> out;
  const auto n = std::int64_t(a.size());
  for (std::int64_t lo = 0; lo < n; lo += TopkCodec::kSegment) {
    const std::int64_t len = std::min(TopkCodec::kSegment, n - lo), k = c.kept_in_segment(len);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(len));
    for (std::int64_t i = 0; i < len; ++i) idx[std::size_t(i)] = i;
    auto mag = [&](std::int64_t i) {
      const float v = a[std::size_t(lo + i)];
      return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
    };
    std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t p, std::int64_t q) { return mag(p) > mag(q); });
    idx.resize(std::size_t(k));
    std::sort(idx.begin(), idx.end());
    for (const auto i : idx) {
      std::int32_t bits = 0;
      std::memcpy(&bits, &a[std::size_t(lo + i)], sizeof bits);
      out.push_back(bits);
    }
    for (std::int64_t j = 0; j < k; j += 2) {
      const std::uint32_t hi = j + 1 < k ? std::uint32_t(idx[std::size_t(j + 1)]) : 0u;
      out.push_back(std::int32_t(std::uint32_t(idx[std::size_t(j)]) | (hi << 16)));
    }
  }
  return out;
}

}  // namespace

TEST(TopkCodec, SelectionIsTheStableSortByMagnitude) {
  // Two and a half segments of values with many ties (a few hundred
  // distinct magnitudes of both signs), signed zeros, denormals, infinities
  // and NaNs (which tie with +-inf), at ratios from one value a segment to all.
  const std::int64_t n = 2 * TopkCodec::kSegment + TopkCodec::kSegment / 2;
  std::vector<float> x(static_cast<std::size_t>(n));
  std::uint64_t s = 12345;
  for (auto& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto r = std::uint32_t(s >> 33);
    switch (r % 16) {
      case 0: v = (r & 16) ? 0.0f : -0.0f; break;
      case 1: v = std::numeric_limits<float>::denorm_min() * float(r % 7); break;
      case 2: v = (r % 97 == 0) ? std::numeric_limits<float>::quiet_NaN() : float(int(r % 301) - 150) * 1e-3f; break;
      case 3: v = (r % 89 == 0) ? -std::numeric_limits<float>::infinity() : float(int(r % 301) - 150); break;
      default: v = float(int(r % 601) - 300) * 1e-2f; break;
    }
  }
  for (const double ratio : {1e-9, 0.001, 0.01, 0.1, 0.5, 0.999, 1.0}) {
    const TopkCodec c(ratio);
    const auto got = send(c, x, std::vector<float>(x.size(), 0.0f)).words;
    std::vector<float> a(x.size());  // x + a zero residual: -0 becomes +0
    for (std::size_t i = 0; i < x.size(); ++i) a[i] = x[i] + 0.0f;
    const auto want = reference_words(c, a);
    ASSERT_EQ(got.size(), want.size()) << "ratio " << ratio;
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "ratio " << ratio << ", word " << i;
  }
}
