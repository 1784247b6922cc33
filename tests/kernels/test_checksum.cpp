// Layout-independent checksums (kernels/checksum.hpp): shard partials add up
// to the whole in any sharding; any single-element change and element swaps
// are detected; memory layout does not matter; golden values pin the format
// (it is stored in checkpoints).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/checksum.hpp"

using namespace exa::test;
using exa::kernels::checksum;

namespace {

template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;

template <class V>
auto host_copy(const V& v) {
  auto h = Kokkos::create_mirror(Kokkos::HostSpace(), v);
  Kokkos::deep_copy(h, v);
  return h;
}

// Host reference: sum of mix64 over a host array.
template <class T>
std::uint64_t host_checksum(const T* x, std::size_t n, std::uint64_t off) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; ++i) s += exa::kernels::checksum_mix64(off + i, exa::kernels::checksum_bits(x[i]));
  return s;
}

// The elements [a, b) of the flat tensor x, copied into their own View.
template <class T, class V>
V1<T> shard_copy(const V& x, std::size_t a, std::size_t b) {
  V1<T> s("shard", b - a);
  Kokkos::View<const T*, Kokkos::LayoutRight, TestDevice, Kokkos::MemoryTraits<Kokkos::Unmanaged>> flat(x.data(),
                                                                                                       x.span());
  Kokkos::deep_copy(s, Kokkos::subview(flat, std::make_pair(a, b)));
  return s;
}

template <class T>
void partials_add_up(const char* what) {
  V2<T> x("x", 37, 53);
  // (unsigned types: no negative values, their conversion would be undefined)
  fill_uniform(x, 42, std::is_signed<T>::value ? -1000.0 : 0.0, 1000.0);
  const std::size_t n = x.size();
  const std::uint64_t whole = checksum(x);
  auto hx = host_copy(x);
  EXPECT_EQ(whole, host_checksum(hx.data(), n, 0));
  const std::vector<std::vector<std::size_t>> cuts = {
      {0, n},
      {0, 1, n},
      {0, n - 1, n},
      {0, n / 2, n},
      {0, 100, 200, 300, n},
      {0, 53, 106, 1000, 1001, 1002, n},  // row-aligned and ragged
      {0, 0, 5, 5, n},                    // empty shards contribute 0
  };
  for (const auto& c : cuts) {
    std::uint64_t sum = 0;
    for (std::size_t k = 0; k + 1 < c.size(); ++k) {
      const auto s = shard_copy<T>(x, c[k], c[k + 1]);
      sum = exa::kernels::checksum_combine(sum, checksum(s, static_cast<exa::index_t>(c[k])));
    }
    EXPECT_EQ(sum, whole) << what << ": sharding with " << c.size() - 1 << " shards";
  }
  // Every way of cutting into 8 equal-ish shards (ZeRO over 8 ranks) and a
  // row-block sharding of the 2-D tensor (tensor parallel over rows).
  for (int parts : {2, 3, 4, 8, 13}) {
    std::uint64_t sum = 0;
    for (int r = 0; r < parts; ++r) {
      const std::size_t a = n * r / parts, b = n * (r + 1) / parts;
      sum += checksum(shard_copy<T>(x, a, b), static_cast<exa::index_t>(a));
    }
    EXPECT_EQ(sum, whole) << what << ": " << parts << " flat shards";
  }
  std::uint64_t rows = 0;
  for (std::size_t r0 = 0; r0 < 37; r0 += 10) {
    const std::size_t r1 = std::min<std::size_t>(r0 + 10, 37);
    auto block = Kokkos::subview(x, std::make_pair(r0, r1), Kokkos::ALL());
    rows += checksum(block, static_cast<exa::index_t>(r0 * 53));
  }
  EXPECT_EQ(rows, whole) << what << ": row blocks";
  std::printf("[checksum %s] %-8s whole %s\n", EXAMOE_TEST_BACKEND_NAME, what,
              exa::kernels::checksum_hex(whole).c_str());
}

}  // namespace

TEST(Checksum, PartialsAddUpFloat) { partials_add_up<float>("float"); }
TEST(Checksum, PartialsAddUpDouble) { partials_add_up<double>("double"); }
TEST(Checksum, PartialsAddUpInt32) { partials_add_up<std::int32_t>("int32"); }
TEST(Checksum, PartialsAddUpInt64) { partials_add_up<std::int64_t>("int64"); }
TEST(Checksum, PartialsAddUpUint16) { partials_add_up<std::uint16_t>("uint16"); }

TEST(Checksum, EveryFlippedBitChangesIt) {
  V1<float> x("x", 1000);
  fill_uniform(x, 1);
  const std::uint64_t base = checksum(x);
  std::set<std::uint64_t> seen{base};
  for (std::size_t i : {std::size_t(0), std::size_t(1), std::size_t(517), std::size_t(999)}) {
    for (int b = 0; b < 32; ++b) {
      auto m = host_copy(x);
      std::uint32_t u;
      std::memcpy(&u, &m(i), 4);
      u ^= (1u << b);
      std::memcpy(&m(i), &u, 4);
      V1<float> y("y", 1000);
      Kokkos::deep_copy(y, m);
      const std::uint64_t c = checksum(y);
      EXPECT_NE(c, base) << "bit " << b << " of element " << i;
      seen.insert(c);
    }
  }
  EXPECT_EQ(seen.size(), 1u + 4 * 32);  // all distinct, too
}

TEST(Checksum, SignedZeroAndNanPayloadCount) {
  // Bit patterns, not values: -0 differs from +0, NaN payloads differ.
  auto with = [](std::uint32_t u) {
    V1<float> a("a", 3);
    auto h = host_copy(a);
    std::memcpy(&h(1), &u, 4);
    Kokkos::deep_copy(a, h);
    return checksum(a);
  };
  EXPECT_NE(with(0x00000000u), with(0x80000000u));
  EXPECT_NE(with(0x7fc00000u), with(0x7fc00001u));
  EXPECT_EQ(with(0x7fc00001u), with(0x7fc00001u));
}

TEST(Checksum, SwappingElementsChangesIt) {
  V1<double> x("x", 4096);
  fill_uniform(x, 2);
  const std::uint64_t base = checksum(x);
  std::uint64_t s = 12345;
  int swaps = 0;
  for (int t = 0; t < 200; ++t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t i = (s >> 33) % 4096;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t j = (s >> 33) % 4096;
    if (i == j) continue;
    // The device-side sum, after swapping i and j on the host.
    auto m = host_copy(x);
    std::swap(m(i), m(j));
    V1<double> y("y", 4096);
    Kokkos::deep_copy(y, m);
    EXPECT_NE(checksum(y), base) << "swap " << i << " <-> " << j;
    ++swaps;
  }
  // A transposed copy (a layout bug's signature).
  V2<float> a("a", 8, 8);
  fill_uniform(a, 3);
  auto ha = host_copy(a);
  V2<float> t("t", 8, 8);
  auto ht = host_copy(t);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) ht(i, j) = ha(j, i);
  Kokkos::deep_copy(t, ht);
  EXPECT_NE(checksum(a), checksum(t));
  EXPECT_GT(swaps, 150);
}

TEST(Checksum, ZerosDependOnSizeAndOffset) {
  // A tensor of zeros still has a nonzero checksum that depends on how many
  // elements there are and where they sit: truncation is detected.
  V1<float> z10("z", 10), z11("z", 11);
  EXPECT_NE(checksum(z10), 0u);
  EXPECT_NE(checksum(z10), checksum(z11));
  EXPECT_NE(checksum(z10, 0), checksum(z10, 1));
  V1<float> empty("e", 0);
  EXPECT_EQ(checksum(empty), 0u);
  EXPECT_EQ(checksum(empty, 77), 0u);
  EXPECT_THROW(checksum(z10, -1), exa::Error);
}

TEST(Checksum, LayoutAndStrideDoNotMatter) {
  // The same logical tensor as LayoutRight, LayoutLeft and a strided
  // subview: same checksum (row-major logical order), ranks 2 and 3.
  V3<float> x("x", 4, 5, 6);
  fill_uniform(x, 9);
  Kokkos::View<float***, Kokkos::LayoutLeft, TestDevice> xl("xl", 4, 5, 6);
  Kokkos::deep_copy(xl, x);
  EXPECT_EQ(checksum(xl), checksum(x));
  V2<float> y("y", 9, 10);
  fill_uniform(y, 10);
  Kokkos::View<float**, Kokkos::LayoutLeft, TestDevice> yl("yl", 9, 10);
  Kokkos::deep_copy(yl, y);
  EXPECT_EQ(checksum(yl), checksum(y));
  // Columns 2..7 of y: a strided view vs its contiguous copy.
  auto cols = Kokkos::subview(y, Kokkos::ALL(), std::make_pair(2, 7));
  V2<float> cc("cc", 9, 5);
  Kokkos::deep_copy(cc, cols);
  EXPECT_EQ(checksum(cols, 3), checksum(cc, 3));
  // Rank-4, LayoutLeft.
  Kokkos::View<double****, Kokkos::LayoutRight, TestDevice> w("w", 2, 3, 4, 5);
  fill_uniform(w, 11);
  Kokkos::View<double****, Kokkos::LayoutLeft, TestDevice> wl("wl", 2, 3, 4, 5);
  Kokkos::deep_copy(wl, w);
  EXPECT_EQ(checksum(wl), checksum(w));
  // And the flat order is what a 1-D view of the same memory gives.
  Kokkos::View<float*, Kokkos::LayoutRight, TestDevice, Kokkos::MemoryTraits<Kokkos::Unmanaged>> f(x.data(), x.size());
  EXPECT_EQ(checksum(f), checksum(x));
}

TEST(Checksum, Bf16AndConstViews) {
  V1<exa::bf16> h("h", 100);
  auto hh = host_copy(h);
  for (int i = 0; i < 100; ++i) hh(i) = exa::to_bf16(0.1f * i);
  Kokkos::deep_copy(h, hh);
  const std::uint64_t c = checksum(h);
  EXPECT_EQ(c, host_checksum(hh.data(), 100, 0));
  Kokkos::View<const exa::bf16*, Kokkos::LayoutRight, TestDevice> ch = h;
  EXPECT_EQ(checksum(ch), c);
}

TEST(Checksum, GoldenValues) {
  // The format is a checkpoint contract: these values must never change.
  // They were cross-checked with an independent Python implementation
  // (splitmix64 finaliser; XXH64 written from its specification).
  using exa::kernels::checksum_mix64;
  EXPECT_EQ(checksum_mix64(0, 0), 0x94a0292e4c3e2ae7ull) << std::hex << checksum_mix64(0, 0);
  EXPECT_EQ(checksum_mix64(1, 0x3f800000u), 0xc7f20d0a58dcdff5ull) << std::hex << checksum_mix64(1, 0x3f800000u);
  V1<float> x("x", 4);
  auto hx = host_copy(x);
  hx(0) = 0.0f;
  hx(1) = 1.0f;
  hx(2) = -0.0f;
  hx(3) = 2.5f;
  Kokkos::deep_copy(x, hx);
  EXPECT_EQ(checksum(x), 0xb68523bb910a2580ull) << std::hex << checksum(x);
  EXPECT_EQ(checksum(x, 1000), 0x92fdb7b0d41592feull) << std::hex << checksum(x, 1000);
}

TEST(Checksum, MerkleRoot) {
  using exa::kernels::checksum_merkle_root;
  using Entries = std::vector<std::pair<std::string, std::uint64_t>>;
  const Entries e5 = {{"/model/embed.weight", 1},
                      {"/model/layers.0.attn.wq.weight", 2},
                      {"/model/norm.weight", 3},
                      {"/optim/exp_avg/embed.weight", 4},
                      {"/optim/exp_avg_sq/embed.weight", 5}};
  const std::uint64_t root = checksum_merkle_root(e5);
  EXPECT_EQ(checksum_merkle_root(e5), root);  // deterministic
  std::set<std::uint64_t> roots{root};
  for (std::size_t i = 0; i < e5.size(); ++i) {
    Entries c = e5;
    c[i].second ^= 1;  // one dataset's checksum changes
    roots.insert(checksum_merkle_root(c));
    Entries n = e5;
    n[i].first += "x";  // a dataset is renamed
    roots.insert(checksum_merkle_root(n));
  }
  Entries sw = e5;
  std::swap(sw[1], sw[2]);  // order matters
  roots.insert(checksum_merkle_root(sw));
  Entries shorter(e5.begin(), e5.end() - 1);  // a dataset is missing
  roots.insert(checksum_merkle_root(shorter));
  // Name/checksum boundary: ("ab", c) vs ("a", ...) cannot collide by concatenation.
  roots.insert(checksum_merkle_root({{"ab", 7}}));
  roots.insert(checksum_merkle_root({{"a", 7}}));
  EXPECT_EQ(roots.size(), 1u + 2 * e5.size() + 4);
  // One entry: the leaf; none: a fixed value distinct from any leaf here.
  EXPECT_EQ(checksum_merkle_root({{"a", 7}}), exa::kernels::checksum_leaf("a", 7));
  EXPECT_NE(checksum_merkle_root({}), checksum_merkle_root({{"", 0}}));
  // A two-level tree is not the same as the flat list of its leaves' hashes.
  EXPECT_NE(checksum_merkle_root({{"a", 1}, {"b", 2}, {"c", 3}}), checksum_merkle_root({{"a", 1}, {"b", 2}}));
  // Golden root (checkpoint contract; cross-checked in Python as above).
  EXPECT_EQ(root, 0x309753bedfceb8bbull) << std::hex << root;
  EXPECT_EQ(exa::kernels::checksum_hex(0x0123456789abcdefull), "0123456789abcdef");
}
