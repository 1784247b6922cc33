// PCGrad (optim/gradient_projection.hpp) on hand-checked vectors: two
// conflicting gradients projected onto each other's normal planes, no
// projection without a conflict, the visiting orders, and the reuse of
// the pairs' dots changing no value against the algorithm as written.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/gradient_projection.hpp"

using namespace exa;

namespace {

optim::GradPart part(const std::vector<float>& v) {
  optim::GradPart d("g", v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

std::vector<float> host(const optim::GradPart& d) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

double dot(const optim::GradPart& a, const optim::GradPart& b) {
  const auto x = host(a), y = host(b);
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += double(x[i]) * double(y[i]);
  return s;
}

}  // namespace

TEST(GradientProjection, ConflictingPairIsProjected) {
  // g1 . g2 = -1: p1 = g1 + g2 / 2 = (0.5, 0.5), p2 = g2 + g1 = (0, 1).
  const auto g1 = part({1, 0}), g2 = part({-1, 1});
  optim::GradPart out("out", 2), work("work", 2);
  const auto rep = optim::project_conflicts({g1, g2}, {1.0, 1.0}, 5, 3, out, work, dot);
  EXPECT_EQ(rep.conflicts, 2);
  ASSERT_EQ(rep.cosines.size(), 1u);
  EXPECT_NEAR(rep.cosines[0], -1.0 / std::sqrt(2.0), 1e-12);
  EXPECT_EQ(host(out), (std::vector<float>{0.5f, 1.5f}));
  // The projected parts are orthogonal to the other task's gradient.
  const auto w = optim::project_conflicts({g1, g2}, {1.0, 0.0}, 5, 3, out, work, dot);
  EXPECT_EQ(w.conflicts, 2);
  EXPECT_NEAR(dot(out, g2), 0.0, 1e-7);
}

TEST(GradientProjection, AgreeingGradientsAreSummedAsTheyAre) {
  const auto g1 = part({1, 2, 0}), g2 = part({0.5, 0, 1});
  optim::GradPart out("out", 3), work("work", 3);
  const auto rep = optim::project_conflicts({g1, g2}, {2.0, 1.0}, 5, 0, out, work, dot);
  EXPECT_EQ(rep.conflicts, 0);
  EXPECT_EQ(host(out), (std::vector<float>{2.5f, 4.0f, 1.0f}));
}

TEST(GradientProjection, OrdersArePermutationsOfTheOtherTasks) {
  bool varies = false;
  for (int step = 0; step < 20; ++step)
    for (int i = 0; i < 4; ++i) {
      auto o = optim::projection_order(7, step, i, 4);
      EXPECT_EQ(o, optim::projection_order(7, step, i, 4));
      varies = varies || o != optim::projection_order(7, step + 1, i, 4);
      std::sort(o.begin(), o.end());
      std::vector<int> want;
      for (int j = 0; j < 4; ++j)
        if (j != i) want.push_back(j);
      EXPECT_EQ(o, want);
    }
  EXPECT_TRUE(varies) << "the order is drawn per step";
}

namespace {

// The algorithm as the header states it: p_i copied, every dot taken afresh.
std::vector<float> plain_pcgrad(const std::vector<optim::GradPart>& g, const std::vector<double>& w,
                                std::uint64_t seed, std::int64_t step, int& conflicts) {
  const std::size_t n = g[0].extent(0);
  optim::GradPart out("out", n), work("work", n);
  conflicts = 0;
  for (int i = 0; i < int(g.size()); ++i) {
    Kokkos::deep_copy(work, g[std::size_t(i)]);
    for (const int j : optim::projection_order(seed, step, i, int(g.size()))) {
      const double gj2 = dot(g[std::size_t(j)], g[std::size_t(j)]);
      const double d = dot(work, g[std::size_t(j)]);
      if (gj2 > 0 && d < 0) {
        optim::axpby(-d / gj2, g[std::size_t(j)], 1.0, work);
        ++conflicts;
      }
    }
    optim::axpby(w[std::size_t(i)], work, 1.0, out);
  }
  return host(out);
}

}  // namespace

TEST(GradientProjection, ReusedDotsChangeNoValue) {
  // Random gradients with a shared component of either sign, so that some
  // pairs conflict and some do not, over several steps' visiting orders.
  for (int K : {2, 3, 4}) {
    int conflicts = 0;
    for (std::int64_t step = 0; step < 6; ++step) {
      std::vector<optim::GradPart> g;
      std::uint32_t state = 12345u + std::uint32_t(K * 100 + step);
      const auto uniform = [&] {
        state = state * 1664525u + 1013904223u;
        return float(state >> 8) / float(1 << 24) - 0.5f;
      };
      std::vector<float> common(257);
      for (float& c : common) c = uniform();
      for (int t = 0; t < K; ++t) {
        const float sign = (t + step) % 3 == 0 ? -1.0f : 1.0f;
        std::vector<float> v(257);
        for (std::size_t k = 0; k < v.size(); ++k) v[k] = sign * common[k] + 0.8f * uniform();
        g.push_back(part(v));
      }
      const std::vector<double> w(std::size_t(K), 1.5);
      int want_conflicts = 0;
      const auto want = plain_pcgrad(g, w, 9, step, want_conflicts);
      optim::GradPart out("out", 257), work("work", 257);
      const auto rep = optim::project_conflicts(g, w, 9, step, out, work, dot);
      EXPECT_EQ(rep.conflicts, want_conflicts) << "K " << K << " step " << step;
      EXPECT_EQ(host(out), want) << "K " << K << " step " << step;
      conflicts += rep.conflicts;
    }
    EXPECT_GT(conflicts, 0) << "K " << K << ": the case must project somewhere";
  }
}
