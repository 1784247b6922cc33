#pragma once
// A quantity timed by both clocks (wall and this process's CPU time), per
// step, and its summary: the median (the robust figure) and the best step.
#include <vector>

namespace exa::bench {

struct Timing {
  std::vector<double> wall, cpu;  // per timed step, seconds
  double wall_median = 0, wall_best = 0, cpu_median = 0, cpu_best = 0;
};

// The median of v (0 when empty; the mean of the middle two when even).
double median(std::vector<double> v);
// Fills t's medians and bests from its per-step times.
void summarise(Timing& t);

}  // namespace exa::bench
