// bf16 and fp16 matrix products (precision.compute): exa::gemm and the
// grouped expert linears under MatmulPrecision::bf16 / fp16, against fp32.
//
// Tolerances, from bf16's 8-bit significand (unit roundoff u = 2^-9 for
// round-to-nearest): each input of a product a*b is rounded with relative
// error <= u, so the product's error is <= (2u + u^2) |a||b| < 2^-7.9 |a||b|;
// the sum over k adds fp32 accumulation error, <= k 2^-24 sum|a||b|. So
//   |C_bf16 - C_exact| <= (2^-8 + k 2^-24) (|A||B|)_ij          (per element)
// and against the exact product of the rounded inputs only the fp32 term
// remains. A product that skipped the rounding would miss the second check
// by the first's margin: the test asserts that the rounding really happened.
// fp16 (11-bit significand, u = 2^-11) gives the same with 2^-10 in place
// of 2^-8, and its range ends at 65504: a larger input becomes infinity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/fp16.hpp"
#include "harness/backend.hpp"
#include "harness/splitmix_noise.hpp"
#include "kernels/convert.hpp"
#include "kernels/cublas_matmul.hpp"
#include "kernels/gemm.hpp"
#include "kernels/matmul_precision.hpp"
#include "kernels/onednn_matmul.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {

using V2 = Kokkos::View<float**, Kokkos::LayoutRight, TestDevice>;
using V3 = Kokkos::View<float***, Kokkos::LayoutRight, TestDevice>;
using H2 = std::vector<std::vector<double>>;

constexpr bool kHost = Kokkos::SpaceAccessibility<TestExec, Kokkos::HostSpace>::accessible;

// Whether this backend has bf16/fp16 products: oneDNN on the host, cuBLAS
// on CUDA.
bool reduced_built() { return kHost ? ek::onednn_available() : ek::cublas_available(); }

template <class V>
void fill(const V& v, std::uint64_t seed) {
  auto h = Kokkos::create_mirror_view(v);
  float* p = h.data();
  for (std::size_t i = 0; i < h.span(); ++i) p[i] = float(2.0 * splitmix_noise(seed, i));
  Kokkos::deep_copy(v, h);
}

enum class Round { none, bf16, fp16 };

H2 host2(const V2& v, Round round = Round::none) {
  auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  H2 h(v.extent(0), std::vector<double>(v.extent(1)));
  for (std::size_t i = 0; i < v.extent(0); ++i)
    for (std::size_t j = 0; j < v.extent(1); ++j) {
      const float x = m(i, j);
      h[i][j] = round == Round::bf16   ? double(exa::to_float(exa::to_bf16(x)))
                : round == Round::fp16 ? double(exa::round_to_fp16(x))
                                       : double(x);
    }
  return h;
}

struct Bounds {
  double worst_vs_exact = 0;    // max |C - exact| / (|A||B|)_ij
  double worst_vs_rounded = 0;  // max |C - exact(rounded inputs)| / (|A||B|)_ij
};

// Checks C = alpha op(A) op(B) + beta C0 against both references.
Bounds check(char ta, char tb, double alpha, const V2& A, const V2& B, double beta, const H2& C0, const V2& C,
             Round round = Round::bf16) {
  const H2 a = host2(A), b = host2(B), ar = host2(A, round), br = host2(B, round), c = host2(C);
  const bool at = ta == 'T', bt = tb == 'T';
  const std::size_t m = c.size(), n = c[0].size(), k = at ? a.size() : a[0].size();
  Bounds w;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double exact = 0, rounded = 0, mag = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const double x = at ? a[p][i] : a[i][p], y = bt ? b[j][p] : b[p][j];
        const double xr = at ? ar[p][i] : ar[i][p], yr = bt ? br[j][p] : br[p][j];
        exact += x * y;
        rounded += xr * yr;
        mag += std::fabs(x * y);
      }
      mag *= std::fabs(alpha);
      const double base = beta * C0[i][j];
      w.worst_vs_exact = std::max(w.worst_vs_exact, std::fabs(c[i][j] - (alpha * exact + base)) / mag);
      w.worst_vs_rounded = std::max(w.worst_vs_rounded, std::fabs(c[i][j] - (alpha * rounded + base)) / mag);
    }
  return w;
}

}  // namespace

TEST(GemmBf16, EveryTransposeAlphaBetaWithinTheBf16Bound) {
  if (!reduced_built()) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  ek::ScopedMatmulPrecision bf16(ek::MatmulPrecision::bf16);
  const index_t m = 37, n = 29, k = 53;
  const double fp32_term = double(k) * std::ldexp(1.0, -24);
  int seed = 1;
  const std::pair<float, float> alpha_beta[] = {{1, 0}, {0.125f, 1}, {-1.5f, 0.5f}};  // nvcc 11.8 deduces no braced list
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'})
      for (auto [alpha, beta] : alpha_beta) {
        V2 A("A", ta == 'T' ? k : m, ta == 'T' ? m : k), B("B", tb == 'T' ? n : k, tb == 'T' ? k : n), C("C", m, n);
        fill(A, seed++);
        fill(B, seed++);
        fill(C, seed++);
        const H2 c0 = host2(C);
        ek::gemm(ta, tb, alpha, A, B, beta, C);
        const Bounds w = check(ta, tb, alpha, A, B, beta, c0, C);
        SCOPED_TRACE(std::string("op ") + ta + tb + " alpha " + std::to_string(alpha) + " beta " +
                     std::to_string(beta));
        EXPECT_LE(w.worst_vs_rounded, 4 * fp32_term) << "not bf16 x bf16 -> fp32 arithmetic";
        EXPECT_LE(w.worst_vs_exact, std::ldexp(1.0, -8) + 4 * fp32_term);
        EXPECT_GT(w.worst_vs_exact, 16 * fp32_term) << "no bf16 rounding seen: the product ran in fp32";
      }
}

TEST(GemmFp16, EveryTransposeWithinTheFp16BoundAndOverflowIsInfinite) {
  if (!reduced_built()) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  ek::ScopedMatmulPrecision fp16(ek::MatmulPrecision::fp16);
  const index_t m = 33, n = 21, k = 45;
  const double fp32_term = double(k) * std::ldexp(1.0, -24);
  int seed = 40;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      V2 A("A", ta == 'T' ? k : m, ta == 'T' ? m : k), B("B", tb == 'T' ? n : k, tb == 'T' ? k : n), C("C", m, n);
      fill(A, seed++);
      fill(B, seed++);
      fill(C, seed++);
      const H2 c0 = host2(C);
      ek::gemm(ta, tb, 0.5f, A, B, 1.0f, C);
      const Bounds w = check(ta, tb, 0.5, A, B, 1.0, c0, C, Round::fp16);
      SCOPED_TRACE(std::string("op ") + ta + tb);
      EXPECT_LE(w.worst_vs_rounded, 4 * fp32_term) << "not fp16 x fp16 -> fp32 arithmetic";
      EXPECT_LE(w.worst_vs_exact, std::ldexp(1.0, -10) + 4 * fp32_term);
      EXPECT_GT(w.worst_vs_exact, 16 * fp32_term) << "no fp16 rounding seen: the product ran in fp32";
    }
  // 70000 rounds to infinity in fp16 (the largest finite value is 65504):
  // the overflow dynamic loss scaling watches for.
  V2 A("A", 2, 3), B("B", 3, 2), C("C", 2, 2);
  Kokkos::deep_copy(A, 1.0f);
  Kokkos::deep_copy(B, 1.0f);
  auto h = Kokkos::create_mirror_view(A);
  Kokkos::deep_copy(h, A);
  h(0, 1) = 70000.0f;
  h(1, 2) = 65000.0f;
  Kokkos::deep_copy(A, h);
  ek::gemm('N', 'N', 1.0f, A, B, 0.0f, C);
  auto c = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), C);
  EXPECT_TRUE(std::isinf(c(0, 0)) && std::isinf(c(0, 1))) << c(0, 0);
  EXPECT_EQ(c(1, 0), 64994.0f) << "65000 rounds to the fp16 value 64992; 1 + 1 + 64992";
}

TEST(GemmBf16, Fp32PrecisionIsUntouched) {
  if (!kHost) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  const index_t m = 16, n = 24, k = 40;
  V2 A("A", m, k), B("B", n, k), C("C", m, n);
  fill(A, 7);
  fill(B, 8);
  ek::gemm('N', 'T', 1.0f, A, B, 0.0f, C);
  const Bounds w = check('N', 'T', 1.0, A, B, 0.0, host2(C), C);
  EXPECT_LE(w.worst_vs_exact, 4 * double(k) * std::ldexp(1.0, -24));
  EXPECT_EQ(ek::matmul_precision(), ek::MatmulPrecision::fp32);
}

// The expert FFN products: grouped forward and backward (dX and dW), with
// an empty group, against the fp32 forms, within the bf16 bound of the
// magnitudes.
TEST(GemmBf16, GroupedLinearForwardAndBackward) {
  if (!reduced_built()) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  const index_t E = 3, in = 24, out = 40, rows = 150;
  const std::vector<index_t> off{0, 70, 70, 150};
  V2 X("X", rows, in), dY("dY", rows, out);
  V3 W("W", E, out, in);
  fill(X, 11);
  fill(dY, 12);
  fill(W, 13);
  auto run = [&](ek::MatmulPrecision p) {
    ek::ScopedMatmulPrecision s(p);
    V2 Y("Y", rows, out), dX("dX", rows, in);
    V3 dW("dW", E, out, in);
    ek::grouped_linear_forward(X, W, off, Y);
    ek::grouped_linear_backward(X, W, dY, off, dX, dW, false);
    auto h = [](auto v) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v); };
    return std::make_tuple(h(Y), h(dX), h(dW));
  };
  const auto [y32, dx32, dw32] = run(ek::MatmulPrecision::fp32);
  const auto [y16, dx16, dw16] = run(ek::MatmulPrecision::bf16);
  // Inputs are uniform in [-1, 1): |x||w| averages 1/4, so a sum over n
  // terms has magnitude <= n; the bound is relative to that.
  auto worst = [](const auto& a, const auto& b, double n) {
    double w = 0;
    for (std::size_t i = 0; i < a.span(); ++i) w = std::max(w, std::fabs(double(a.data()[i]) - b.data()[i]) / n);
    return w;
  };
  const double bound = std::ldexp(1.0, -8);
  const double wy = worst(y32, y16, in), wdx = worst(dx32, dx16, out), wdw = worst(dw32, dw16, 80);
  EXPECT_LE(wy, bound);
  EXPECT_LE(wdx, bound);
  EXPECT_LE(wdw, bound);
  EXPECT_GT(wy, 1e-6) << "the bf16 forward matched fp32 exactly: no rounding happened";
  EXPECT_GT(wdw, 1e-6) << "the bf16 dW matched fp32 exactly: no rounding happened";
  for (index_t o = 0; o < out; ++o)
    for (index_t i = 0; i < in; ++i) EXPECT_EQ(dw16(1, o, i), 0.0f) << "the empty group's dW";
}

// Operands stored in bf16 (the tensors the model keeps in bf16): a bf16
// product reads them as they are, and gives what it gives for their fp32
// originals, which it rounds to the same values: bit for bit, in every
// transpose, plain and grouped (the expert products, row chunks as host
// tasks where the backend has threads). An fp32 product refuses them.
using B2 = Kokkos::View<exa::bf16**, Kokkos::LayoutRight, TestDevice>;

B2 stored_bf16(const V2& v) {
  B2 b("stored", v.extent(0), v.extent(1));
  ek::fp32_to_bf16(v, b);
  return b;
}

template <class V>
std::vector<float> bits_of(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.span());
}

TEST(GemmBf16, StoredBf16OperandsGiveTheSameProductsBitForBit) {
  if (!reduced_built()) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  ek::ScopedMatmulPrecision bf16(ek::MatmulPrecision::bf16);
  const index_t m = 21, n = 19, k = 33;
  int seed = 100;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      V2 A("A", ta == 'T' ? k : m, ta == 'T' ? m : k), B("B", tb == 'T' ? n : k, tb == 'T' ? k : n);
      V2 C0("C0", m, n), C1("C1", m, n), C2("C2", m, n), C3("C3", m, n);
      fill(A, seed++);
      fill(B, seed++);
      fill(C0, seed);
      Kokkos::deep_copy(C1, C0);
      Kokkos::deep_copy(C2, C0);
      Kokkos::deep_copy(C3, C0);
      const B2 A16 = stored_bf16(A), B16 = stored_bf16(B);
      ek::gemm(ta, tb, 0.5f, A, B, 1.0f, C0);
      ek::gemm(ta, tb, 0.5f, A16, B, 1.0f, C1);
      ek::gemm(ta, tb, 0.5f, A, B16, 1.0f, C2);
      ek::gemm(ta, tb, 0.5f, A16, B16, 1.0f, C3);
      SCOPED_TRACE(std::string("op ") + ta + tb);
      const auto want = bits_of(C0);
      EXPECT_EQ(bits_of(C1), want) << "A stored in bf16";
      EXPECT_EQ(bits_of(C2), want) << "B stored in bf16";
      EXPECT_EQ(bits_of(C3), want) << "both stored in bf16";
    }
  const index_t E = 3, in = 24, out = 40, rows = 150;
  const std::vector<index_t> off{0, 70, 70, 150};
  V2 X("X", rows, in), dY("dY", rows, out);
  V3 W("W", E, out, in);
  fill(X, 21);
  fill(dY, 22);
  fill(W, 23);
  const B2 X16 = stored_bf16(X), dY16 = stored_bf16(dY);
  V2 Y("Y", rows, out), Y16("Y16", rows, out), dX("dX", rows, in), dX16("dX16", rows, in);
  V3 dW("dW", E, out, in), dW16("dW16", E, out, in);
  ek::grouped_linear_forward(X, W, off, Y);
  ek::grouped_linear_forward(X16, W, off, Y16);
  ek::grouped_linear_backward(X, W, dY, off, dX, dW, false);
  ek::grouped_linear_backward(X16, W, dY16, off, dX16, dW16, false);
  EXPECT_EQ(bits_of(Y16), bits_of(Y)) << "grouped forward";
  EXPECT_EQ(bits_of(dX16), bits_of(dX)) << "grouped backward, dX";
  EXPECT_EQ(bits_of(dW16), bits_of(dW)) << "grouped backward, dW";
}

// Operands that are column ranges of wider tensors (row stride > width,
// as the column halves of a fused projection): read in place with their
// stride, again bit for bit.
TEST(GemmBf16, StridedStoredBf16OperandsGiveTheSameProducts) {
  if (!reduced_built()) GTEST_SKIP() << "covered by RefusedWhereNotBuilt";
  ek::ScopedMatmulPrecision bf16(ek::MatmulPrecision::bf16);
  const index_t m = 13, n = 11, k = 17, pad = 5;
  int seed = 200;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      const index_t ar = ta == 'T' ? k : m, ac = ta == 'T' ? m : k, br = tb == 'T' ? n : k, bc = tb == 'T' ? k : n;
      V2 Aw("Aw", ar, ac + pad), Bw("Bw", br, bc + pad), C0("C0", m, n), C1("C1", m, n);
      fill(Aw, seed++);
      fill(Bw, seed++);
      const B2 Aw16 = stored_bf16(Aw), Bw16 = stored_bf16(Bw);
      const auto cols = [](index_t c) { return Kokkos::make_pair(index_t(2), index_t(2) + c); };
      const auto A = Kokkos::subview(Aw, Kokkos::ALL, cols(ac)), B = Kokkos::subview(Bw, Kokkos::ALL, cols(bc));
      const auto A16 = Kokkos::subview(Aw16, Kokkos::ALL, cols(ac)), B16 = Kokkos::subview(Bw16, Kokkos::ALL, cols(bc));
      ek::gemm(ta, tb, 1.0f, A, B, 0.0f, C0);
      ek::gemm(ta, tb, 1.0f, A16, B16, 0.0f, C1);
      SCOPED_TRACE(std::string("op ") + ta + tb);
      EXPECT_EQ(bits_of(C1), bits_of(C0));
    }
}

// bf16 storage goes with bf16 products only: an fp32 product refuses a
// bf16 operand, and so does an fp16 one (fp16 would round the bf16 values
// again, to other values than an fp32 operand's).
TEST(GemmBf16, StoredBf16OperandOfAnFp32OrFp16ProductIsRefused) {
  V2 A("A", 4, 4), C("C", 4, 4);
  const B2 A16("A16", 4, 4);
  {
    ek::ScopedMatmulPrecision fp32(ek::MatmulPrecision::fp32);
    try {
      ek::gemm('N', 'N', 1.0f, A16, A, 0.0f, C);
      FAIL() << "an fp32 product took a bf16 operand";
    } catch (const exa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bf16 storage"), std::string::npos) << e.what();
    }
  }
  if (!reduced_built()) return;
  ek::ScopedMatmulPrecision fp16(ek::MatmulPrecision::fp16);
  try {
    ek::gemm('N', 'N', 1.0f, A16, A, 0.0f, C);
    FAIL() << "an fp16 product took a bf16 operand";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 storage"), std::string::npos) << e.what();
  }
}

// Where there is no bf16 path (a device space without cuBLAS, or a host
// build without oneDNN) a bf16 product is refused with a message, never
// computed in fp32.
TEST(GemmBf16, RefusedWhereNotBuilt) {
  if (reduced_built()) {
    Kokkos::View<float**, Kokkos::LayoutLeft, TestDevice> L("L", 8, 8);
    V2 R("R", 8, 8), C("C", 8, 8);
    ek::ScopedMatmulPrecision bf16(ek::MatmulPrecision::bf16);
    try {
      ek::gemm('N', 'N', 1.0f, L, R, 0.0f, C);
      FAIL() << "a column-major operand was taken";
    } catch (const exa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("row-contiguous"), std::string::npos) << e.what();
    }
    return;
  }
  V2 A("A", 4, 4), B("B", 4, 4), C("C", 4, 4);
  ek::ScopedMatmulPrecision bf16(ek::MatmulPrecision::bf16);
  try {
    ek::gemm('N', 'N', 1.0f, A, B, 0.0f, C);
    FAIL() << "a bf16 product ran where no bf16 path is built";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision.compute"), std::string::npos) << e.what();
  }
}

// precision.matmul = "tf32": fp32 products on a GPU's TF32 tensor cores,
// whose inputs keep 10 significand bits (u = 2^-11): the bound is fp16's,
// 2^-10 + k 2^-24 of |A||B|, and a product that skipped the rounding
// would sit at the fp32 term. cuBLAS's TF32 mode only allows TF32: a GPU
// before compute capability 8.0, or NVIDIA_TF32_OVERRIDE=0, runs fp32, so
// the test skips there. Elsewhere it is refused, naming the fix.
TEST(GemmTf32, WithinTheTf32BoundOrRefused) {
  if (!ek::cublas_available() || kHost) {
    if (ek::cublas_available()) GTEST_SKIP() << "TF32 is a CUDA backend's; this test executable runs on the host";
    try {
      ek::cublas_set_tf32(true);
      FAIL() << "TF32 was accepted by a build without cuBLAS";
    } catch (const exa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("precision.matmul = \"fp32\""), std::string::npos) << e.what();
    }
    EXPECT_FALSE(ek::cublas_tf32());
    return;
  }
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (major < 8) GTEST_SKIP() << "compute capability " << major << ".x has no TF32";
  if (const char* o = std::getenv("NVIDIA_TF32_OVERRIDE"); o != nullptr && std::string(o) == "0")
    GTEST_SKIP() << "NVIDIA_TF32_OVERRIDE=0 turns TF32 off";
#endif
  // Large enough for cuBLAS to take its tensor-core kernels.
  const index_t m = 256, n = 256, k = 256;
  V2 A("A", m, k), B("B", n, k), C("C", m, n);
  fill(A, 21);
  fill(B, 22);
  struct Tf32 {  // on for this scope, off after it, even when a check throws
    Tf32() { ek::cublas_set_tf32(true); }
    ~Tf32() { ek::cublas_set_tf32(false); }
  };
  {
    Tf32 on;
    ek::gemm('N', 'T', 1.0f, A, B, 0.0f, C);
  }
  const double fp32_term = double(k) * std::ldexp(1.0, -24);
  const Bounds w = check('N', 'T', 1.0, A, B, 0.0, host2(C), C, Round::none);
  EXPECT_LE(w.worst_vs_exact, std::ldexp(1.0, -10) + 4 * fp32_term);
  EXPECT_GT(w.worst_vs_exact, 16 * fp32_term) << "no TF32 rounding seen: the product ran in fp32";
  ek::gemm('N', 'T', 1.0f, A, B, 0.0f, C);
  EXPECT_LE(check('N', 'T', 1.0, A, B, 0.0, host2(C), C, Round::none).worst_vs_exact, 4 * fp32_term)
      << "TF32 stayed on after it was turned off";
}
