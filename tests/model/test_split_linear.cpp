// The Linear seam carries tensor parallelism: in one process, P parts of a
// column-parallel Linear followed by a row-parallel one, with the partial
// outputs (and the partial input gradients of the column split) summed as
// the tensor-parallel allreduce would, match the unsplit pair forward and
// backward. Each part is a contiguous copy of its box of the weight, as a
// rank would hold it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/fd_check.hpp"
#include "model/seams/local_linear.hpp"

using exa::model::LocalLinear;
using V2 = exa::View2<float>;
using W2 = exa::model::Linear<float>::Wt;

namespace {

V2 random(const char* name, std::int64_t r, std::int64_t c, std::uint64_t seed) {
  exa::View2<double> d("d", r, c);
  exa::test::fill_uniform(Kokkos::View<double*, exa::Layout, exa::Device>(d.data(), d.span()), seed, -1.0, 1.0);
  V2 f(std::string(name), r, c);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  auto hf = Kokkos::create_mirror_view(f);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) hf(i, j) = float(hd(i, j));
  Kokkos::deep_copy(f, hf);
  return f;
}

// Rows [r0, r0 + n) or columns [c0, c0 + n) of w as a contiguous matrix.
V2 rows(const V2& w, std::int64_t r0, std::int64_t n) {
  V2 p("rows", n, w.extent(1));
  Kokkos::deep_copy(p, Kokkos::subview(w, Kokkos::make_pair(r0, r0 + n), Kokkos::ALL));
  return p;
}
V2 cols(const V2& w, std::int64_t c0, std::int64_t n) {
  V2 p("cols", w.extent(0), n);
  Kokkos::deep_copy(p, Kokkos::subview(w, Kokkos::ALL, Kokkos::make_pair(c0, c0 + n)));
  return p;
}
W2 as_w(const V2& v) { return W2(v.data(), v.extent(0), v.extent(1)); }

// a += b
void add(const V2& a, const V2& b) {
  Kokkos::parallel_for(
      "add", Kokkos::RangePolicy<exa::ExecSpace>(0, a.span()), KOKKOS_LAMBDA(const std::size_t i) {
        a.data()[i] += b.data()[i];
      });
}

std::vector<double> host(const V2& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.span());
}

double rel(const V2& a, const V2& b) {
  const auto ha = host(a), hb = host(b);
  double diff = 0, mag = 0;
  for (std::size_t i = 0; i < ha.size(); ++i) {
    diff = std::max(diff, std::fabs(ha[i] - hb[i]));
    mag = std::max(mag, std::fabs(hb[i]));
  }
  return diff / mag;
}

void check_split(int parts) {
  const std::int64_t N = 12, in = 16, hidden = 24, out = 16;
  LocalLinear<float> lin;
  const auto x = random("x", N, in, 1), w1 = random("w1", hidden, in, 2), w2 = random("w2", out, hidden, 3);
  const auto dy = random("dy", N, out, 4);

  // Unsplit: h = x w1^T, y = h w2^T and its backward.
  V2 h("h", N, hidden), y("y", N, out), dh("dh", N, hidden), dx("dx", N, in);
  V2 dw1("dw1", hidden, in), dw2("dw2", out, hidden);
  lin.forward(x, as_w(w1), h);
  lin.forward(h, as_w(w2), y);
  lin.backward(h, as_w(w2), dy, dh, as_w(dw2));
  lin.backward(x, as_w(w1), dh, dx, as_w(dw1));

  // Split: part p holds rows [p*s, (p+1)*s) of w1 (column parallel) and the
  // same columns of w2 (row parallel).
  const std::int64_t s = hidden / parts;
  V2 y_sum("y_sum", N, out), dx_sum("dx_sum", N, in);
  double worst_dw = 0;
  for (int p = 0; p < parts; ++p) {
    const auto w1p = rows(w1, p * s, s), w2p = cols(w2, p * s, s);
    V2 hp("hp", N, s), yp("yp", N, out), dhp("dhp", N, s), dxp("dxp", N, in);
    V2 dw1p("dw1p", s, in), dw2p("dw2p", out, s);
    lin.forward(x, as_w(w1p), hp);         // column: this part's output features, no communication
    lin.forward(hp, as_w(w2p), yp);        // row: a partial sum of y
    add(y_sum, yp);                        // the row-parallel allreduce
    lin.backward_input(dy, as_w(w2p), dhp);          // row: input gradient of the local features
    lin.backward_weight(hp, dy, as_w(dw2p), false);  // row: this part's weight gradient
    lin.backward_input(dhp, as_w(w1p), dxp);         // column: a partial sum of dx
    lin.backward_weight(x, dhp, as_w(dw1p), false);
    add(dx_sum, dxp);                                // the column-parallel backward allreduce
    worst_dw = std::max({worst_dw, rel(dw1p, rows(dw1, p * s, s)), rel(dw2p, cols(dw2, p * s, s))});
  }
  const double ey = rel(y_sum, y), edx = rel(dx_sum, dx);
  std::printf("%d parts: y %.2e, dx %.2e, weight gradients %.2e (tolerance 1e-6)\n", parts, ey, edx, worst_dw);
  EXPECT_LT(ey, 1e-6);
  EXPECT_LT(edx, 1e-6);
  EXPECT_LT(worst_dw, 1e-6);
}

}  // namespace

TEST(SplitLinear, ColumnThenRowInTwoPartsMatchesUnsplit) { check_split(2); }
TEST(SplitLinear, ColumnThenRowInFourPartsMatchesUnsplit) { check_split(4); }
