// comm::secure_sum over MPI (one party per rank): the secure sum equals the
// plain one bit for bit; the last rank dropping out of a round leaves the
// sum of the others, secure or not; the bytes each party moves are the ones
// comm::secagg::round_bytes counts, which gives the expansion.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "comm/fixed_point.hpp"
#include "comm/mpi_env.hpp"
#include "comm/secure_aggregation.hpp"
#include "comm/secure_sum.hpp"
#include "core/error.hpp"

namespace {

std::vector<std::uint32_t> input(int rank, int size, std::size_t n) {
  std::vector<std::uint32_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = exa::comm::encode_fixed(0.001 * double(i % 97) - 0.02 * rank, size);
  return x;
}

std::vector<std::uint32_t> expected(int size, std::size_t n, int dropped) {
  std::vector<std::uint32_t> s(n, 0);
  for (int u = 0; u < size; ++u)
    if (u != dropped) {
      const auto x = input(u, size, n);
      for (std::size_t i = 0; i < n; ++i) s[i] += x[i];
    }
  return s;
}

}  // namespace

TEST(SecureSum, SecureAndPlainSumsAgreeAndDropsAreRecovered) {
  const MPI_Comm w = MPI_COMM_WORLD;
  const int rank = exa::comm_rank(w), size = exa::comm_size(w);
  if (size < 2) GTEST_SKIP() << "secure aggregation needs two parties";
  if (!exa::comm::secagg::available()) GTEST_SKIP() << "built without libsodium";
  const std::size_t n = 3001;
  for (bool secure : {false, true})
    for (int dropped : {-1, size - 1}) {
      if (secure && dropped >= 0 && size - 1 < size / 2 + 1) continue;  // below the threshold
      auto x = input(rank, size, n);
      exa::comm::SecureSumOptions o;
      o.secure = secure;
      o.threshold = size / 2 + 1;
      o.round = 3;
      o.drop = rank == dropped;
      const auto r = exa::comm::secure_sum(w, x, o);
      EXPECT_EQ(x, expected(size, n, dropped)) << (secure ? "secure" : "plain") << ", dropped " << dropped;
      for (int u = 0; u < size; ++u) EXPECT_EQ(r.kept[std::size_t(u)], u == dropped ? 0 : 1);
      if (dropped < 0) {
        const auto want = exa::comm::secagg::round_bytes(n, size, rank == 0);
        EXPECT_EQ(r.bytes_sent + r.bytes_received, secure ? want.secure : want.plain);
        if (rank <= 1)
          std::printf("[rank %d] %s: %lld bytes moved (plain would be %lld: %.5fx)\n", rank,
                      secure ? "secure" : "plain", (long long)(r.bytes_sent + r.bytes_received),
                      (long long)want.plain, double(want.secure) / double(want.plain));
      }
    }
}

TEST(SecureSum, TooFewSurvivorsFailOnEveryParty) {
  const MPI_Comm w = MPI_COMM_WORLD;
  const int rank = exa::comm_rank(w), size = exa::comm_size(w);
  if (size < 2) GTEST_SKIP() << "secure aggregation needs two parties";
  if (!exa::comm::secagg::available()) GTEST_SKIP() << "built without libsodium";
  auto x = input(rank, size, 100);
  exa::comm::SecureSumOptions o;
  o.secure = true;
  o.threshold = size;  // every party needed
  o.drop = rank == size - 1;
  EXPECT_THROW(exa::comm::secure_sum(w, x, o), exa::Error);
}

// Plain aggregation needs no second party.
TEST(SecureSum, PlainSumAtAnySize) {
  const MPI_Comm w = MPI_COMM_WORLD;
  const int rank = exa::comm_rank(w), size = exa::comm_size(w);
  auto x = input(rank, size, 257);
  const auto r = exa::comm::secure_sum(w, x, {});
  EXPECT_EQ(x, expected(size, 257, -1));
  EXPECT_EQ(r.bytes_sent + r.bytes_received, exa::comm::secagg::round_bytes(257, size, rank == 0).plain);
}
