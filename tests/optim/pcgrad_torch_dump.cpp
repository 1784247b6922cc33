// pcgrad_torch_dump OUT.json: synthetic conflicting tasks for
// pcgrad_crosscheck.py. Task t's loss is 0.5 |A_t x - b_t|^2 on a shared
// parameter vector x (n = 40); its gradient A_t^T (A_t x - b_t) goes through
// ExaMoE's optim::project_conflicts (with a plain dot product, one rank) for
// K = 2 and 3 tasks at several steps (random visiting orders). The JSON
// holds x, A, b, the weights, each task's visiting order and the combined
// gradient; the script recomputes the gradients with autograd and PCGrad
// independently in PyTorch.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <fmt/format.h>
#include <random>
#include <string>
#include <vector>

#include "optim/gradient_projection.hpp"

using namespace exa;

namespace {

std::string list(const std::vector<double>& x) {
  std::string s = "[";
  for (std::size_t k = 0; k < x.size(); ++k) s += fmt::format("{}{:.17g}", k ? "," : "", x[k]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pcgrad_torch_dump OUT.json\n");
    return 2;
  }
  Kokkos::ScopeGuard guard(argc, argv);
  const int n = 40, rows = 12;
  std::mt19937_64 rng(2020);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::string out = "[";
  int case_no = 0;
  for (const int K : {2, 3})
    for (const std::int64_t step : {0, 1, 7}) {
      std::vector<double> x(n);
      for (auto& v : x) v = normal(rng);
      std::vector<std::vector<double>> A(static_cast<std::size_t>(K)), b(static_cast<std::size_t>(K));
      std::vector<optim::GradPart> grads;
      std::vector<std::vector<double>> g(static_cast<std::size_t>(K), std::vector<double>(n, 0.0));
      for (int t = 0; t < K; ++t) {
        A[std::size_t(t)].resize(std::size_t(rows * n));
        b[std::size_t(t)].resize(rows);
        for (auto& v : A[std::size_t(t)]) v = normal(rng);
        for (auto& v : b[std::size_t(t)]) v = normal(rng) * 3.0;
        // Task t's targets pull against task 0's: b_t mirrors A_t x0 for odd t.
        std::vector<double> r(rows);
        for (int i = 0; i < rows; ++i) {
          double ax = 0;
          for (int j = 0; j < n; ++j) ax += A[std::size_t(t)][std::size_t(i * n + j)] * x[std::size_t(j)];
          if (t % 2 == 1) b[std::size_t(t)][std::size_t(i)] = 2.0 * ax - b[std::size_t(t)][std::size_t(i)];
          r[std::size_t(i)] = ax - b[std::size_t(t)][std::size_t(i)];
        }
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < rows; ++i)
            g[std::size_t(t)][std::size_t(j)] += A[std::size_t(t)][std::size_t(i * n + j)] * r[std::size_t(i)];
        optim::GradPart d("g", n);
        auto h = Kokkos::create_mirror_view(d);
        for (int j = 0; j < n; ++j) h(j) = float(g[std::size_t(t)][std::size_t(j)]);
        Kokkos::deep_copy(d, h);
        grads.push_back(d);
      }
      std::vector<double> weights;
      for (int t = 0; t < K; ++t) weights.push_back(1.0 + 0.5 * t);
      optim::GradPart comb("out", n), work("work", n);
      const optim::GlobalDot dot = [](const optim::GradPart& a, const optim::GradPart& c) {
        auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
        auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
        double s = 0;
        for (std::size_t k = 0; k < ha.extent(0); ++k) s += double(ha(k)) * double(hc(k));
        return s;
      };
      const auto rep = optim::project_conflicts(grads, weights, 99, step, comb, work, dot);
      auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), comb);
      std::vector<double> combined(hc.data(), hc.data() + n);
      std::string orders = "[", As = "[", bs = "[";
      for (int t = 0; t < K; ++t) {
        const auto o = optim::projection_order(99, step, t, K);
        orders += fmt::format("{}{}", t ? "," : "", list(std::vector<double>(o.begin(), o.end())));
        As += fmt::format("{}{}", t ? "," : "", list(A[std::size_t(t)]));
        bs += fmt::format("{}{}", t ? "," : "", list(b[std::size_t(t)]));
      }
      out += fmt::format(
          "{}{{\"K\":{},\"n\":{},\"rows\":{},\"step\":{},\"x\":{},\"A\":{}],\"b\":{}],\"weights\":{},\"orders\":{}],"
          "\"conflicts\":{},\"out\":{}}}",
          case_no++ ? "," : "", K, n, rows, step, list(x), As, bs, list(weights), orders, rep.conflicts, list(combined));
    }
  out += "]\n";
  std::FILE* f = std::fopen(argv[1], "w");
  if (!f) return 1;
  std::fputs(out.c_str(), f);
  std::fclose(f);
  return 0;
}
