#include "optim/gradient_projection.hpp"

#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace exa::optim {

void axpbyz(double a, const GradPart& x, double b, const GradPart& y, const GradPart& z) {
  const float fa = float(a), fb = float(b);
  Kokkos::parallel_for(
      "exa::pcgrad::axpby", Kokkos::RangePolicy<ExecSpace>(0, index_t(z.extent(0))),
      KOKKOS_LAMBDA(const index_t k) { z(k) = fa * x(k) + fb * y(k); });
}

std::vector<int> projection_order(std::uint64_t seed, std::int64_t step, int task, int tasks) {
  std::vector<int> order;
  for (int j = 0; j < tasks; ++j)
    if (j != task) order.push_back(j);
  // Fisher-Yates with one philox draw per position.
  const PhiloxKey key = philox_key(seed, "examoe.pcgrad.order");
  const auto s = static_cast<std::uint64_t>(step);
  for (int k = int(order.size()) - 1; k > 0; --k) {
    const PhiloxCounter r = philox4x32(PhiloxCounter{static_cast<std::uint32_t>(task), static_cast<std::uint32_t>(k),
                                                     static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32)},
                                       key);
    const int pick = int(r.c0 % static_cast<std::uint32_t>(k + 1));
    std::swap(order[std::size_t(k)], order[std::size_t(pick)]);
  }
  return order;
}

ProjectionReport project_conflicts(const std::vector<GradPart>& grads, const std::vector<double>& weights,
                                   std::uint64_t seed, std::int64_t step, const GradPart& out, const GradPart& work,
                                   const GlobalDot& dot, std::vector<double> sq) {
  const int K = int(grads.size());
  EXA_REQUIRE(K >= 1 && weights.size() == grads.size(), "gradient projection: {} task gradients and {} weights", K,
              weights.size());
  for (const auto& g : grads)
    EXA_REQUIRE(g.extent(0) == out.extent(0) && work.extent(0) == out.extent(0),
                "gradient projection: the task gradients, out and work must have one length");
  EXA_REQUIRE(sq.empty() || int(sq.size()) == K, "gradient projection: {} squared norms for {} tasks", sq.size(), K);
  ProjectionReport rep;
  const auto at = [](int i) { return std::size_t(i); };
  if (sq.empty())
    for (int i = 0; i < K; ++i) sq.push_back(dot(grads[at(i)], grads[at(i)]));
  std::vector<double> pair(at(K * K));  // g_i . g_j, both ways
  for (int i = 0; i < K; ++i)
    for (int j = i + 1; j < K; ++j) {
      const double d = dot(grads[at(i)], grads[at(j)]);
      pair[at(i * K + j)] = pair[at(j * K + i)] = d;
      const double n = std::sqrt(sq[at(i)] * sq[at(j)]);
      rep.cosines.push_back(n > 0 ? d / n : 0.0);
    }
  Kokkos::deep_copy(out, 0.0f);
  for (int i = 0; i < K; ++i) {
    bool projected = false;  // p_i is g_i until its first projection
    for (const int j : projection_order(seed, step, i, K)) {
      const double gj2 = sq[at(j)];
      if (!(gj2 > 0)) continue;  // a zero gradient conflicts with nothing
      const double d = projected ? dot(work, grads[at(j)]) : pair[at(i * K + j)];
      if (d < 0) {
        if (!projected) Kokkos::deep_copy(work, grads[at(i)]);
        projected = true;
        axpby(-d / gj2, grads[at(j)], 1.0, work);
        ++rep.conflicts;
      }
    }
    axpby(weights[at(i)], projected ? work : grads[at(i)], 1.0, out);
  }
  Kokkos::fence();
  return rep;
}

}  // namespace exa::optim
