// Secure aggregation's protocol (comm/secure_aggregation.hpp) driven in one
// process: the secure sum is the plain sum exactly; a party that drops after
// the key exchange is unmasked by the survivors' shares, down to the
// threshold and not below; a masked vector carries no trace of its input
// (a correlation and a uniformity test, both of which flag an unmasked
// one); Shamir shares rebuild from any threshold of them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <vector>

#include "comm/fixed_point.hpp"
#include "comm/secure_aggregation.hpp"
#include "comm/shamir.hpp"
#include "core/error.hpp"

namespace sa = exa::comm::secagg;
namespace shamir = exa::comm::shamir;

namespace {

// A fixed stream for Shamir's own tests (the protocol draws from libsodium).
shamir::RandomBytes counter_stream(std::uint64_t seed) {
  return [s = seed](std::uint8_t* p, std::size_t n) mutable {
    for (std::size_t i = 0; i < n; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = std::uint8_t(s >> 56);
    }
  };
}

// A party's input: fixed-point values of a smooth, structured signal.
std::vector<std::uint32_t> input(int party, std::size_t n, int parties) {
  std::vector<std::uint32_t> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = exa::comm::encode_fixed(0.05 * std::sin(0.01 * double(i) + party) + 0.01 * party, parties);
  return x;
}

// One round among `parties`; those in `drops` leave after the share
// exchange. Returns the aggregator's unmasked sum; `ys` gets the masked
// vectors.
std::vector<std::uint32_t> run_round(int parties, int threshold, std::size_t n, const std::vector<int>& drops,
                                     std::vector<std::vector<std::uint32_t>>* ys = nullptr) {
  const std::uint64_t round = 7;
  std::vector<sa::Party> p;
  for (int u = 0; u < parties; ++u) p.emplace_back(u, parties, threshold, round, counter_stream(100 + std::uint64_t(u)));
  std::vector<sa::Key> keys;
  for (const auto& q : p) keys.push_back(q.public_key());
  // received[v][u]: u's share for v.
  const std::size_t P = static_cast<std::size_t>(parties);
  std::vector<std::vector<sa::Share>> received(P, std::vector<sa::Share>(P));
  for (int u = 0; u < parties; ++u) {
    const auto s = p[std::size_t(u)].shares();
    for (int v = 0; v < parties; ++v) received[std::size_t(v)][std::size_t(u)] = s[std::size_t(v)];
  }
  std::vector<char> kept(P, 1);
  for (int d : drops) kept[std::size_t(d)] = 0;
  std::vector<std::uint32_t> sum(n, 0);
  for (int u = 0; u < parties; ++u) {
    auto y = input(u, n, parties);
    p[std::size_t(u)].mask(y.data(), n, keys);
    if (ys) ys->push_back(y);
    if (!kept[std::size_t(u)]) continue;  // its vector never arrives
    for (std::size_t i = 0; i < n; ++i) sum[i] += y[i];
  }
  std::vector<std::vector<sa::Key>> shares(P);
  for (int v = 0; v < parties; ++v)
    if (kept[std::size_t(v)]) shares[std::size_t(v)] = p[std::size_t(v)].unmask_shares(kept, received[std::size_t(v)]);
  sa::unmask(sum.data(), n, round, threshold, kept, keys, shares);
  return sum;
}

std::vector<std::uint32_t> plain_sum(int parties, std::size_t n, const std::vector<int>& drops) {
  std::vector<std::uint32_t> s(n, 0);
  for (int u = 0; u < parties; ++u) {
    if (std::find(drops.begin(), drops.end(), u) != drops.end()) continue;
    const auto x = input(u, n, parties);
    for (std::size_t i = 0; i < n; ++i) s[i] += x[i];
  }
  return s;
}

// Pearson correlation of two vectors read as signed 32-bit integers.
double correlation(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  const double n = double(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ma += double(std::int32_t(a[i])), mb += double(std::int32_t(b[i]));
  ma /= n, mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = double(std::int32_t(a[i])) - ma, y = double(std::int32_t(b[i])) - mb;
    sab += x * y, saa += x * x, sbb += y * y;
  }
  return sab / std::sqrt(saa * sbb);
}

// Chi-square statistic of the top bytes against uniform (255 degrees of
// freedom: mean 255, standard deviation 22.6).
double chi_square_top_byte(const std::vector<std::uint32_t>& y) {
  std::vector<double> count(256, 0);
  for (auto v : y) ++count[v >> 24];
  const double e = double(y.size()) / 256;
  double chi = 0;
  for (double c : count) chi += (c - e) * (c - e) / e;
  return chi;
}

}  // namespace

TEST(Shamir, AnyThresholdOfTheSharesRebuildsTheSecret) {
  const shamir::Bytes secret = {1, 2, 3, 250, 0, 77, 128, 9};
  const auto shares = shamir::split(secret, 5, 3, counter_stream(1));
  for (const std::vector<int>& ids : {std::vector<int>{0, 1, 2}, {4, 2, 0}, {1, 3, 4}, {0, 1, 2, 3, 4}}) {
    std::vector<shamir::Bytes> s;
    for (int i : ids) s.push_back(shares[std::size_t(i)]);
    EXPECT_EQ(shamir::reconstruct(ids, s), secret);
  }
  // Two shares of a threshold-3 secret give another value.
  EXPECT_NE(shamir::reconstruct({0, 1}, {shares[0], shares[1]}), secret);
}

TEST(SecureAggregation, SecureSumIsThePlainSumExactly) {
  if (!sa::available()) GTEST_SKIP() << "built without libsodium";
  for (int parties : {2, 3, 5}) {
    const std::size_t n = 10007;  // part of one 16384-value piece of the mask stream
    const auto sum = run_round(parties, parties / 2 + 1, n, {});
    EXPECT_EQ(sum, plain_sum(parties, n, {})) << parties << " parties";
  }
  const std::size_t big = 40000;  // three 16384-value pieces of the mask stream
  EXPECT_EQ(run_round(3, 2, big, {}), plain_sum(3, big, {}));
}

TEST(SecureAggregation, DroppedPartiesAreUnmaskedByTheSurvivors) {
  if (!sa::available()) GTEST_SKIP() << "built without libsodium";
  const std::size_t n = 5000;
  EXPECT_EQ(run_round(3, 2, n, {1}), plain_sum(3, n, {1})) << "one of three dropped";
  EXPECT_EQ(run_round(5, 3, n, {0, 4}), plain_sum(5, n, {0, 4})) << "two of five dropped, threshold 3";
  try {
    run_round(5, 3, n, {0, 2, 4});
    ADD_FAILURE() << "two survivors cannot unmask with threshold 3";
  } catch (const exa::Error& e) {
    std::printf("three of five dropped: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("fewer than federated.threshold = 3"), std::string::npos) << e.what();
  }
}

TEST(SecureAggregation, AMaskedVectorCarriesNoTraceOfItsInput) {
  if (!sa::available()) GTEST_SKIP() << "built without libsodium";
  const std::size_t n = 100000;
  std::vector<std::vector<std::uint32_t>> ys;
  run_round(3, 2, n, {}, &ys);
  const double bound_r = 5 / std::sqrt(double(n)), bound_chi = 255 + 6 * 22.6;
  for (int u = 0; u < 3; ++u) {
    const auto x = input(u, n, 3);
    const double r = correlation(x, ys[std::size_t(u)]), chi = chi_square_top_byte(ys[std::size_t(u)]);
    // The same statistics on the unmasked input: the tests can fail.
    const double r0 = correlation(x, x), chi0 = chi_square_top_byte(x);
    std::printf("party %d: masked corr %.5f (bound %.4f), chi2 %.1f (bound %.1f); unmasked corr %.3f, chi2 %.3g\n", u,
                r, bound_r, chi, bound_chi, r0, chi0);
    EXPECT_LT(std::fabs(r), bound_r);
    EXPECT_LT(chi, bound_chi);
    EXPECT_GT(std::fabs(r0), bound_r);
    EXPECT_GT(chi0, bound_chi);
  }
}

TEST(FixedPoint, RoundTripsAndClampsToWhatTheSumCanHold) {
  EXPECT_EQ(exa::comm::decode_fixed(exa::comm::encode_fixed(0.25, 3)), 0.25);
  EXPECT_NEAR(exa::comm::decode_fixed(exa::comm::encode_fixed(-1.2345678, 3)), -1.2345678, 0.5 / (1 << 24));
  std::int64_t clamped = 0;
  const double lim = exa::comm::fixed_point_limit(3);
  EXPECT_NEAR(exa::comm::decode_fixed(exa::comm::encode_fixed(1e6, 3, &clamped)), lim, 1e-6);
  EXPECT_EQ(clamped, 1);
  // Three values at the limit sum without wrapping.
  const std::uint32_t s = 3 * exa::comm::encode_fixed(lim, 3);
  EXPECT_NEAR(exa::comm::decode_fixed(s), 3 * lim, 1e-6);
}
