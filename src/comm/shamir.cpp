#include "comm/shamir.hpp"

#include <array>

#include "core/error.hpp"

namespace exa::comm::shamir {
namespace {

struct Tables {
  std::array<std::uint8_t, 512> exp{};
  std::array<std::uint8_t, 256> log{};
  Tables() {
    unsigned x = 1;
    for (int i = 0; i < 255; ++i) {
      exp[std::size_t(i)] = std::uint8_t(x);
      log[x] = std::uint8_t(i);
      x ^= (x << 1) ^ ((x & 0x80) ? 0x11b : 0);  // x * 3 in GF(2^8)
      x &= 0xff;
    }
    for (int i = 255; i < 512; ++i) exp[std::size_t(i)] = exp[std::size_t(i - 255)];
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

std::uint8_t mul(std::uint8_t a, std::uint8_t b) {
  if (a == 0 || b == 0) return 0;
  const auto& t = tables();
  return t.exp[std::size_t(t.log[a]) + t.log[b]];
}
std::uint8_t div(std::uint8_t a, std::uint8_t b) {
  if (a == 0) return 0;
  const auto& t = tables();
  return t.exp[std::size_t(t.log[a]) + 255 - t.log[b]];
}

}  // namespace

std::vector<Bytes> split(const Bytes& secret, int n, int threshold, const RandomBytes& random) {
  EXA_REQUIRE(threshold >= 1 && threshold <= n && n <= 255,
              "shamir::split: need 1 <= threshold ({}) <= parties ({}) <= 255", threshold, n);
  std::vector<Bytes> shares(std::size_t(n), Bytes(secret.size()));
  Bytes coef(static_cast<std::size_t>(threshold));
  for (std::size_t b = 0; b < secret.size(); ++b) {
    coef[0] = secret[b];
    if (threshold > 1) random(coef.data() + 1, coef.size() - 1);
    for (int i = 0; i < n; ++i) {
      const std::uint8_t x = std::uint8_t(i + 1);
      std::uint8_t y = 0;
      for (int k = threshold - 1; k >= 0; --k) y = std::uint8_t(mul(y, x) ^ coef[std::size_t(k)]);  // Horner
      shares[std::size_t(i)][b] = y;
    }
  }
  return shares;
}

Bytes reconstruct(const std::vector<int>& ids, const std::vector<Bytes>& shares) {
  EXA_REQUIRE(!ids.empty() && ids.size() == shares.size(), "shamir::reconstruct: {} ids for {} shares", ids.size(),
              shares.size());
  const std::size_t len = shares[0].size();
  // Lagrange weights at x = 0: prod_{j != i} x_j / (x_j - x_i), and
  // subtraction is xor in GF(2^8).
  std::vector<std::uint8_t> w(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXA_REQUIRE(ids[i] >= 0 && ids[i] < 255 && shares[i].size() == len,
                "shamir::reconstruct: share {} has id {} and {} bytes (want 0..254 and {})", i, ids[i],
                shares[i].size(), len);
    std::uint8_t num = 1, den = 1;
    const std::uint8_t xi = std::uint8_t(ids[i] + 1);
    for (std::size_t j = 0; j < ids.size(); ++j) {
      if (j == i) continue;
      const std::uint8_t xj = std::uint8_t(ids[j] + 1);
      EXA_REQUIRE(xj != xi, "shamir::reconstruct: party {} given twice", ids[i]);
      num = mul(num, xj);
      den = mul(den, std::uint8_t(xj ^ xi));
    }
    w[i] = div(num, den);
  }
  Bytes secret(len, 0);
  for (std::size_t b = 0; b < len; ++b)
    for (std::size_t i = 0; i < ids.size(); ++i) secret[b] ^= mul(w[i], shares[i][b]);
  return secret;
}

}  // namespace exa::comm::shamir
