#include "bench/bench_timing.hpp"

#include <algorithm>

namespace exa::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void summarise(Timing& t) {
  t.wall_median = median(t.wall);
  t.cpu_median = median(t.cpu);
  t.wall_best = t.wall.empty() ? 0 : *std::min_element(t.wall.begin(), t.wall.end());
  t.cpu_best = t.cpu.empty() ? 0 : *std::min_element(t.cpu.begin(), t.cpu.end());
}

}  // namespace exa::bench
