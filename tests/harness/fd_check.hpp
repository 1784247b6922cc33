#pragma once
// Central finite-difference checks of analytic gradients, on any backend.
//
// The usual pattern for a kernel y = f(x):
//   fill x and a fixed random "upstream gradient" r (same shape as y);
//   loss(x) = sum(f(x) * r), so dL/dy = r;
//   run the kernel's backward with dy = r to get dx;
//   expect_grad_matches_fd("f/dx", x, dx, [&]{ forward(); return dot(y, r); });
// The check perturbs every element of x (or a strided subset) by +-h, and
// reports the worst error, so the test log documents how close the match is.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "harness/backend.hpp"

namespace exa::test {

// Deterministic uniform fill in [lo, hi) (host splitmix64, then deep_copy).
template <class V>
void fill_uniform(const V& v, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  auto h = Kokkos::create_mirror_view(v);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  using T = typename V::non_const_value_type;
  T* p = h.data();
  for (std::size_t i = 0; i < h.span(); ++i) {
    s += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    p[i] = static_cast<T>(lo + (hi - lo) * u);
  }
  Kokkos::deep_copy(v, h);
}

// sum(a * b) over all elements, computed on the host in double.
template <class A, class B>
double dot(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  EXPECT_EQ(ha.span(), hb.span());
  double s = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) s += double(ha.data()[i]) * double(hb.data()[i]);
  return s;
}

struct FdReport {
  double worst_err = 0;    // max |a - n| / max(1, |n|)
  double worst_analytic = 0, worst_numeric = 0;
  std::size_t worst_index = 0, checked = 0;
};

// Compares gradient view `grad` with central differences of `loss()` with
// respect to `param`. `loss` must recompute everything from `param`.
// At most `max_checks` elements are probed (evenly strided) to keep big
// tensors cheap; 0 means all.
template <class P, class G, class Loss>
FdReport expect_grad_matches_fd(const std::string& what, const P& param, const G& grad, Loss&& loss,
                                double tol = 1e-6, double h = 1e-5, std::size_t max_checks = 0) {
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), param);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
  const std::size_t n = hp.span();
  const std::size_t stride = (max_checks == 0 || n <= max_checks) ? 1 : (n + max_checks - 1) / max_checks;
  FdReport r;
  for (std::size_t i = 0; i < n; i += stride) {
    using T = typename P::non_const_value_type;
    const T orig = hp.data()[i];
    hp.data()[i] = orig + T(h);
    Kokkos::deep_copy(param, hp);
    const double lp = loss();
    hp.data()[i] = orig - T(h);
    Kokkos::deep_copy(param, hp);
    const double lm = loss();
    hp.data()[i] = orig;
    const double num = (lp - lm) / (2 * h);
    const double ana = double(hg.data()[i]);
    const double err = std::fabs(ana - num) / std::max(1.0, std::fabs(num));
    // A NaN error (NaN gradient or loss) is the worst and stays the worst.
    if (!std::isnan(r.worst_err) && (std::isnan(err) || err > r.worst_err || r.checked == 0)) {
      r.worst_err = err;
      r.worst_index = i;
      r.worst_analytic = ana;
      r.worst_numeric = num;
    }
    ++r.checked;
  }
  Kokkos::deep_copy(param, hp);
  std::printf("[fd %s] %-28s checked %zu, worst err %.3e (analytic %.9g vs numeric %.9g at %zu), tol %.1e\n",
              EXAMOE_TEST_BACKEND_NAME, what.c_str(), r.checked, r.worst_err, r.worst_analytic,
              r.worst_numeric, r.worst_index, tol);
  EXPECT_LE(r.worst_err, tol) << what << ": analytic " << r.worst_analytic << " vs numeric "
                              << r.worst_numeric << " at flat index " << r.worst_index;
  return r;
}

// Largest |a - b| / max(1, |b|) between two views of equal span.
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double w = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) {
    const double x = double(ha.data()[i]), y = double(hb.data()[i]);
    const double e = std::fabs(x - y) / std::max(1.0, std::fabs(y));
    if (std::isnan(e)) return e;  // std::max would drop it
    w = std::max(w, e);
  }
  return w;
}

}  // namespace exa::test
