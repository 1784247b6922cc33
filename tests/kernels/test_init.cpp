// Parameter initialisation (kernels/init.hpp): a tensor filled whole equals
// its shards filled separately, bit for bit, in any sharding; values follow
// N(0, std^2); the stream depends on seed and name; fill_constant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "harness/backend.hpp"
#include "kernels/init.hpp"

namespace {

using exa::test::TestDevice;
template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;

template <class V>
std::vector<typename V::non_const_value_type> to_vec(const V& v) {
  auto h = Kokkos::create_mirror(Kokkos::HostSpace(), v);
  Kokkos::deep_copy(h, v);
  return std::vector<typename V::non_const_value_type>(h.data(), h.data() + h.span());
}

template <class T>
std::size_t bit_mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

template <class T>
void whole_equals_shards() {
  const std::uint64_t seed = 1234;
  const char* name = "layers.0.moe.experts.w1";
  const double sd = 0.02;
  V3<T> whole("w1", 4, 9, 13);  // [E, F, d]
  exa::kernels::init_normal(whole, seed, name, sd);
  const auto ref = to_vec(whole);
  const std::size_t n = ref.size();

  // Flat shards of any size (ZeRO-3 / FSDP), including empty and 1-element.
  const std::vector<std::vector<std::size_t>> cuts = {
      {0, n}, {0, 1, n}, {0, n / 3, 2 * n / 3, n}, {0, 5, 5, 6, 117, 118, 400, n}};
  for (const auto& c : cuts) {
    std::vector<T> cat;
    for (std::size_t k = 0; k + 1 < c.size(); ++k) {
      V1<T> s("shard", c[k + 1] - c[k]);
      exa::kernels::init_normal(s, seed, name, sd, static_cast<exa::index_t>(c[k]));
      const auto v = to_vec(s);
      cat.insert(cat.end(), v.begin(), v.end());
    }
    EXPECT_EQ(bit_mismatches(cat, ref), 0u) << c.size() - 1 << " shards";
  }
  // Expert-parallel shards: experts [2, 4) as a [2, F, d] tensor.
  V3<T> ep("w1_ep", 2, 9, 13);
  exa::kernels::init_normal(ep, seed, name, sd, 2 * 9 * 13);
  const auto v = to_vec(ep);
  EXPECT_EQ(bit_mismatches(v, std::vector<T>(ref.begin() + 2 * 9 * 13, ref.end())), 0u) << "expert shard";
  // Element i is std * philox_normal(key, i), rounded once: bit-identical to
  // the host formula on host backends; a GPU's log/cos may differ in the
  // last bit of the double, so there only closeness is asserted.
  const exa::PhiloxKey key = exa::philox_key(seed, name);
  constexpr bool host_exec = Kokkos::SpaceAccessibility<exa::test::TestExec, Kokkos::HostSpace>::accessible;
  for (std::size_t i : {std::size_t(0), std::size_t(1), n / 2, n - 1}) {
    const T want = static_cast<T>(sd * exa::philox_normal(key, i));
    if (host_exec) {
      EXPECT_EQ(std::memcmp(&ref[i], &want, sizeof(T)), 0) << i;
    } else {
      EXPECT_NEAR(ref[i], want, 4 * std::numeric_limits<T>::epsilon() * std::fabs(want)) << i;
    }
  }
}

}  // namespace

TEST(Init, WholeEqualsShardsFloat) { whole_equals_shards<float>(); }
TEST(Init, WholeEqualsShardsDouble) { whole_equals_shards<double>(); }

TEST(Init, RowShardsOfAMatrix) {
  // Tensor-parallel row blocks of a [V, d] matrix.
  V2<float> w("embed", 50, 24);
  exa::kernels::init_normal(w, 7, "embed.weight", 0.02);
  const auto ref = to_vec(w);
  std::vector<float> cat;
  for (int r0 = 0; r0 < 50; r0 += 16) {
    const int rows = std::min(16, 50 - r0);
    V2<float> blk("blk", rows, 24);
    exa::kernels::init_normal(blk, 7, "embed.weight", 0.02, static_cast<exa::index_t>(r0) * 24);
    const auto v = to_vec(blk);
    cat.insert(cat.end(), v.begin(), v.end());
  }
  EXPECT_EQ(bit_mismatches(cat, ref), 0u);
}

TEST(Init, MeanAndStdWithinStatisticalBounds) {
  const std::size_t n = 1u << 20;
  const double sd = 0.02;
  V1<double> x("x", n);
  exa::kernels::init_normal(x, 42, "lm_head.weight", sd);
  const auto v = to_vec(x);
  double s = 0, s2 = 0, mx = 0;
  for (double z : v) {
    s += z;
    s2 += z * z;
    mx = std::max(mx, std::fabs(z));
  }
  const double mean = s / n, var = s2 / n - mean * mean, stdv = std::sqrt(var);
  std::printf("[init %s] n=%zu mean %.3e std %.6f (want %.3f) max|x|/std %.2f\n", EXAMOE_TEST_BACKEND_NAME, n, mean,
              stdv, sd, mx / sd);
  // 6-sigma bounds: sd(mean) = sd/sqrt(n), sd(std) ~= sd/sqrt(2n).
  EXPECT_NEAR(mean, 0.0, 6 * sd / std::sqrt(double(n)));
  EXPECT_NEAR(stdv, sd, 6 * sd / std::sqrt(2.0 * n));
  EXPECT_LT(mx / sd, 7.0);  // P(|z| > 7) ~ 2.6e-12 per draw
  EXPECT_GT(mx / sd, 3.5);  // a million normals reach past 3.5 sigma
}

TEST(Init, FloatMomentsAndScaling) {
  // std scales the draw: std=0.5 gives 25x std=0.02 (to float rounding).
  const std::size_t n = 4096;
  V1<float> a("a", n), b("b", n);
  exa::kernels::init_normal(a, 3, "layers.1.attn.wo.weight", 0.02);
  exa::kernels::init_normal(b, 3, "layers.1.attn.wo.weight", 0.5);
  const auto va = to_vec(a), vb = to_vec(b);
  for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(vb[i], 25.0f * va[i], 1e-6f * (1 + std::fabs(vb[i]))) << i;
  V1<float> z("z", n);
  exa::kernels::init_normal(z, 3, "layers.1.attn.wo.weight", 0.0);
  for (float x : to_vec(z)) EXPECT_EQ(x, 0.0f);
}

TEST(Init, DifferentNamesAndSeedsGiveDifferentValues) {
  const std::size_t n = 1000;
  auto draw = [&](std::uint64_t seed, const char* name) {
    V1<float> x("x", n);
    exa::kernels::init_normal(x, seed, name, 1.0);
    return to_vec(x);
  };
  const auto a = draw(1, "layers.0.mlp.w1");
  EXPECT_EQ(bit_mismatches(a, draw(1, "layers.0.mlp.w1")), 0u);  // reproducible
  for (const auto& other : {draw(1, "layers.0.mlp.w3"), draw(1, "layers.1.mlp.w1"), draw(2, "layers.0.mlp.w1")}) {
    EXPECT_GT(bit_mismatches(a, other), n - 5);
    // ... and uncorrelated.
    double c = 0;
    for (std::size_t i = 0; i < n; ++i) c += double(a[i]) * double(other[i]);
    EXPECT_LT(std::fabs(c / n), 6.0 / std::sqrt(double(n)));
  }
  // Within one tensor, (almost) no repeats: 1000 float normals may share a
  // value by chance, a broken counter would repeat many.
  std::set<float> distinct(a.begin(), a.end());
  EXPECT_GE(distinct.size(), n - 2);
}

TEST(Init, FillConstant) {
  V2<float> w("norm", 3, 17);
  exa::kernels::fill_constant(w, 1.0f);
  for (float x : to_vec(w)) EXPECT_EQ(x, 1.0f);
  V3<double> m("m", 2, 3, 4);
  exa::kernels::init_normal(m, 1, "m", 1.0);
  exa::kernels::fill_constant(m, 0);  // int literal converts to the scalar
  for (double x : to_vec(m)) EXPECT_EQ(x, 0.0);
  V1<float> e("e", 0);
  EXPECT_NO_THROW(exa::kernels::fill_constant(e, 2.0f));
}

TEST(Init, RejectsNegativeOffsetAndStd) {
  V1<float> x("x", 4);
  EXPECT_THROW(exa::kernels::init_normal(x, 1, "x", 0.02, -1), exa::Error);
  EXPECT_THROW(exa::kernels::init_normal(x, 1, "x", -0.02), exa::Error);
}
