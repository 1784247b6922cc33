#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/gemm.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {

template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;
using HostV2 = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;

template <class V>
HostV2 to_host(const V& v) {
  HostV2 h("h", v.extent(0), v.extent(1));
  auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (std::size_t i = 0; i < v.extent(0); ++i)
    for (std::size_t j = 0; j < v.extent(1); ++j) h(i, j) = double(m(i, j));
  return h;
}

// C = alpha op(A) op(B) + beta C on the host, in double.
HostV2 ref_gemm(char ta, char tb, double alpha, const HostV2& A, const HostV2& B, double beta, const HostV2& C0) {
  const bool at = ta == 'T', bt = tb == 'T';
  const std::size_t m = at ? A.extent(1) : A.extent(0), k = at ? A.extent(0) : A.extent(1);
  const std::size_t n = bt ? B.extent(0) : B.extent(1);
  HostV2 C("C", m, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) s += (at ? A(p, i) : A(i, p)) * (bt ? B(j, p) : B(p, j));
      C(i, j) = alpha * s + beta * C0(i, j);
    }
  return C;
}

double max_abs_diff(const HostV2& a, const HostV2& b) {
  EXPECT_EQ(a.extent(0), b.extent(0));
  EXPECT_EQ(a.extent(1), b.extent(1));
  double w = 0;
  for (std::size_t i = 0; i < a.extent(0); ++i)
    for (std::size_t j = 0; j < a.extent(1); ++j) w = std::max(w, std::fabs(a(i, j) - b(i, j)));
  return w;
}

}  // namespace

// Subviews the grouped and batched forms take must stay LayoutRight, or
// Kokkos Kernels would skip the BLAS TPL and fall back to its own kernel.
static_assert(std::is_same<decltype(Kokkos::subview(std::declval<V2<float>>(),
                                                    Kokkos::make_pair(index_t(0), index_t(1)), Kokkos::ALL))::array_layout,
                           Kokkos::LayoutRight>::value,
              "row-range subview must be LayoutRight");
static_assert(std::is_same<decltype(Kokkos::subview(std::declval<V3<float>>(), index_t(0), Kokkos::ALL,
                                                    Kokkos::ALL))::array_layout,
                           Kokkos::LayoutRight>::value,
              "matrix subview of a rank-3 View must be LayoutRight");

TEST(Gemm, AllTransposeCombinationsMatchReference) {
  const index_t m = 5, n = 7, k = 4;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      V2<double> A("A", ta == 'N' ? m : k, ta == 'N' ? k : m);
      V2<double> B("B", tb == 'N' ? k : n, tb == 'N' ? n : k);
      V2<double> C("C", m, n);
      fill_uniform(A, 1);
      fill_uniform(B, 2);
      fill_uniform(C, 3);
      const auto expect = ref_gemm(ta, tb, 0.7, to_host(A), to_host(B), 0.3, to_host(C));
      ek::gemm(ta, tb, 0.7, A, B, 0.3, C);
      EXPECT_LT(max_abs_diff(to_host(C), expect), 1e-13) << "transA=" << ta << " transB=" << tb;
    }
}

TEST(Gemm, EmptyInnerDimensionAppliesBeta) {
  V2<double> A("A", 3, 0), B("B", 0, 4), C("C", 3, 4);
  fill_uniform(C, 4);
  const auto c0 = to_host(C);
  ek::gemm('N', 'N', 1.0, A, B, 2.0, C);
  auto c1 = to_host(C);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(c1(i, j), 2.0 * c0(i, j));
  ek::gemm('N', 'N', 1.0, A, B, 0.0, C);
  c1 = to_host(C);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(c1(i, j), 0.0);
}

TEST(Gemm, ShapeMismatchThrows) {
  V2<double> A("A", 3, 4), B("B", 5, 2), C("C", 3, 2);
  EXPECT_THROW(ek::gemm('N', 'N', 1.0, A, B, 0.0, C), exa::Error);
  EXPECT_THROW(ek::gemm('X', 'N', 1.0, A, B, 0.0, C), exa::Error);
}

TEST(Linear, ForwardIsXTimesWTransposed) {
  V2<double> x("x", 6, 5), W("W", 4, 5), y("y", 6, 4);
  fill_uniform(x, 5);
  fill_uniform(W, 6);
  ek::linear_forward(x, W, y);
  HostV2 zero("z", 6, 4);
  EXPECT_LT(max_abs_diff(to_host(y), ref_gemm('N', 'T', 1.0, to_host(x), to_host(W), 0.0, zero)), 1e-13);
  // accumulate adds onto y
  const auto y1 = to_host(y);
  ek::linear_forward(x, W, y, /*accumulate=*/true);
  const auto y2 = to_host(y);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(y2(i, j), 2 * y1(i, j), 1e-13);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const index_t N = 6, in = 5, out = 4;
  V2<double> x("x", N, in), W("W", out, in), y("y", N, out), r("r", N, out);
  V2<double> dx("dx", N, in), dW("dW", out, in);
  fill_uniform(x, 7);
  fill_uniform(W, 8);
  fill_uniform(r, 9);
  fill_uniform(dW, 10);  // garbage: must be overwritten when not accumulating
  ek::linear_backward(x, W, r, dx, dW, /*accumulate_dW=*/false);
  auto loss = [&] {
    ek::linear_forward(x, W, y);
    return dot(y, r);
  };
  expect_grad_matches_fd("linear/dx", x, dx, loss);
  expect_grad_matches_fd("linear/dW", W, dW, loss);

  // accumulate_dW and accumulate_dx add onto what is there; an empty dx View skips dx.
  const auto dW1 = to_host(dW), dx1 = to_host(dx);
  ek::linear_backward(x, W, r, dx, dW, /*accumulate_dW=*/true, /*accumulate_dx=*/true);
  const auto dW2 = to_host(dW), dx2 = to_host(dx);
  for (index_t i = 0; i < out; ++i)
    for (index_t j = 0; j < in; ++j) EXPECT_NEAR(dW2(i, j), 2 * dW1(i, j), 1e-13);
  for (index_t i = 0; i < N; ++i)
    for (index_t j = 0; j < in; ++j) EXPECT_NEAR(dx2(i, j), 2 * dx1(i, j), 1e-13);
  ek::linear_backward(x, W, r, V2<double>(), dW, /*accumulate_dW=*/false);
  EXPECT_LT(max_abs_diff(to_host(dW), dW1), 1e-13);
}

TEST(Gemm, StridedBatchedMatchesPerMatrixReference) {
  const index_t b = 3, m = 4, n = 5, k = 3;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      V3<double> A("A", b, ta == 'N' ? m : k, ta == 'N' ? k : m);
      V3<double> B("B", b, tb == 'N' ? k : n, tb == 'N' ? n : k);
      V3<double> C("C", b, m, n);
      fill_uniform(A, 11);
      fill_uniform(B, 12);
      fill_uniform(C, 13);
      std::vector<HostV2> expect;
      for (index_t i = 0; i < b; ++i)
        expect.push_back(ref_gemm(ta, tb, 1.5, to_host(Kokkos::subview(A, i, Kokkos::ALL, Kokkos::ALL)),
                                  to_host(Kokkos::subview(B, i, Kokkos::ALL, Kokkos::ALL)), -0.5,
                                  to_host(Kokkos::subview(C, i, Kokkos::ALL, Kokkos::ALL))));
      ek::gemm_batched(ta, tb, 1.5, A, B, -0.5, C);
      for (index_t i = 0; i < b; ++i)
        EXPECT_LT(max_abs_diff(to_host(Kokkos::subview(C, i, Kokkos::ALL, Kokkos::ALL)), expect[i]), 1e-13)
            << "batch " << i << " transA=" << ta << " transB=" << tb;
    }
}

namespace {
// E = 4 experts, expert 1 and expert 3 get no rows, row 9 is padding.
const std::vector<index_t> kOffsets = {0, 3, 3, 9, 9};
constexpr index_t kRows = 10, kIn = 5, kOut = 3, kE = 4;
}  // namespace

TEST(Grouped, ForwardMatchesPerExpertReference) {
  V2<double> X("X", kRows, kIn), Y("Y", kRows, kOut);
  V3<double> W("W", kE, kOut, kIn);
  fill_uniform(X, 14);
  fill_uniform(W, 15);
  Kokkos::deep_copy(Y, 42.0);
  ek::grouped_linear_forward(X, W, kOffsets, Y);
  const auto hX = to_host(X), hY = to_host(Y);
  for (index_t e = 0; e < kE; ++e) {
    const auto hW = to_host(Kokkos::subview(W, e, Kokkos::ALL, Kokkos::ALL));
    for (index_t r = kOffsets[e]; r < kOffsets[e + 1]; ++r)
      for (index_t o = 0; o < kOut; ++o) {
        double s = 0;
        for (index_t i = 0; i < kIn; ++i) s += hX(r, i) * hW(o, i);
        EXPECT_NEAR(hY(r, o), s, 1e-13) << "expert " << e << " row " << r;
      }
  }
  for (index_t o = 0; o < kOut; ++o) EXPECT_EQ(hY(kRows - 1, o), 42.0) << "padding row must be untouched";
}

TEST(Grouped, BackwardMatchesFiniteDifferencesWithEmptyExperts) {
  V2<double> X("X", kRows, kIn), Y("Y", kRows, kOut), R("R", kRows, kOut), dX("dX", kRows, kIn);
  V3<double> W("W", kE, kOut, kIn), dW("dW", kE, kOut, kIn);
  fill_uniform(X, 16);
  fill_uniform(W, 17);
  fill_uniform(R, 18);
  fill_uniform(dW, 19);  // garbage, including the empty experts' slices: must become 0
  ek::grouped_linear_backward(X, W, R, kOffsets, dX, dW, /*accumulate_dW=*/false);
  auto loss = [&] {
    Kokkos::deep_copy(Y, 0.0);
    ek::grouped_linear_forward(X, W, kOffsets, Y);
    return dot(Y, R);
  };
  expect_grad_matches_fd("grouped_linear/dX", X, dX, loss);
  expect_grad_matches_fd("grouped_linear/dW", W, dW, loss);
  auto hdW = Kokkos::create_mirror(dW);  // a copy, not an alias, on host backends too
  Kokkos::deep_copy(hdW, dW);
  for (index_t e : {index_t(1), index_t(3)})
    for (index_t o = 0; o < kOut; ++o)
      for (index_t i = 0; i < kIn; ++i) EXPECT_EQ(hdW(e, o, i), 0.0) << "empty expert " << e;

  // Accumulating doubles every expert's gradient (and keeps empty ones at 0).
  ek::grouped_linear_backward(X, W, R, kOffsets, V2<double>(), dW, /*accumulate_dW=*/true);
  auto hdW2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dW);
  for (std::size_t i = 0; i < hdW.span(); ++i) EXPECT_NEAR(hdW2.data()[i], 2 * hdW.data()[i], 1e-13);
}

TEST(Grouped, AllExpertsEmpty) {
  V2<double> X("X", 2, kIn), Y("Y", 2, kOut), dX("dX", 2, kIn);
  V3<double> W("W", 2, kOut, kIn), dW("dW", 2, kOut, kIn);
  fill_uniform(dW, 20);
  const std::vector<index_t> offsets = {0, 0, 0};
  ek::grouped_linear_forward(X, W, offsets, Y);
  ek::grouped_linear_backward(X, W, Y, offsets, dX, dW, false);
  EXPECT_EQ(exa::test::dot(dW, dW), 0.0);
}

TEST(Grouped, BadOffsetsThrow) {
  V2<double> X("X", 4, kIn), Y("Y", 4, kOut);
  V3<double> W("W", 2, kOut, kIn);
  EXPECT_THROW(ek::grouped_linear_forward(X, W, std::vector<index_t>{0, 2}, Y), exa::Error);        // E+1 entries
  EXPECT_THROW(ek::grouped_linear_forward(X, W, std::vector<index_t>{0, 3, 2}, Y), exa::Error);     // decreasing
  EXPECT_THROW(ek::grouped_linear_forward(X, W, std::vector<index_t>{0, 2, 5}, Y), exa::Error);     // past the end
}

TEST(Gemm, Fp32LinearMatchesDoubleReference) {
  const index_t N = 33, in = 40, out = 24;
  V2<float> x("x", N, in), W("W", out, in), y("y", N, out), dy("dy", N, out), dx("dx", N, in), dW("dW", out, in);
  fill_uniform(x, 21);
  fill_uniform(W, 22);
  fill_uniform(dy, 23);
  ek::linear_forward(x, W, y);
  ek::linear_backward(x, W, dy, dx, dW, false);
  HostV2 z1("z", N, out), z2("z", N, in), z3("z", out, in);
  EXPECT_LT(max_abs_diff(to_host(y), ref_gemm('N', 'T', 1.0, to_host(x), to_host(W), 0.0, z1)), 2e-5);
  EXPECT_LT(max_abs_diff(to_host(dx), ref_gemm('N', 'N', 1.0, to_host(dy), to_host(W), 0.0, z2)), 2e-5);
  EXPECT_LT(max_abs_diff(to_host(dW), ref_gemm('T', 'N', 1.0, to_host(dy), to_host(x), 0.0, z3)), 2e-5);
}
