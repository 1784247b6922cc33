#pragma once
// examoe-bench --growth: the cost of expert growth and its distillation in
// one run (docs/performance.md, "Expert growth"). Three trainings of the
// deck on this rank, alternated `pairs` times so that a slow minute of a
// shared machine hits each alike:
//
//   grown      the deck as written: its [growth] schedule, distillation included
//   plain      the same growth with growth.distill_steps = 0
//   static     no growth, at the schedule's mean expert count over the steps
//
// Each training's time covers its whole step loop, so the growth events'
// stalls and the teacher's forwards count against the grown runs. The
// figures are tokens/s by both clocks, best of the pairs (a time-sliced
// run is only ever slower), the ratios to the static run, each event's
// stall and the teacher's share of the grown run, from the runs'
// metrics.jsonl.
#include <cstdint>
#include <string>
#include <vector>

namespace exa::bench {

struct GrowthRun {
  std::string name;
  double wall_s = 0, cpu_s = 0;  // best of the pairs
  double tokens = 0;
  std::int64_t experts = 0;  // static: its count; else the last
};

struct GrowthBench {
  std::vector<GrowthRun> runs;  // grown, plain, static
  struct Event {
    std::int64_t step = 0, from = 0, to = 0;
    double stall_s = 0, teacher_s = 0;  // teacher_s: making and saving the teacher, inside the stall
  };
  std::vector<Event> events;  // the grown run's (its last pair)
  double teacher_s = 0;       // the teacher's forwards in the grown run (its last pair)
  std::int64_t steps = 0;
};

// `deck` and `overrides` as examoe-bench took them; the runs go under
// `workdir` (a temporary directory when empty, removed).
GrowthBench run_growth_bench(const std::string& deck, const std::vector<std::string>& overrides, int pairs,
                             const std::string& workdir);
std::string format_growth_report(const GrowthBench& b);
std::string growth_json_line(const GrowthBench& b);

}  // namespace exa::bench
