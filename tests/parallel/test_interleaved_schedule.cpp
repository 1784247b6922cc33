// The interleaved 1F1B schedule (parallel/pipeline/schedules.hpp): its
// order on each stage, the contexts it keeps alive, and, simulated across
// the stages with every chunk forward and backward one time unit and no
// transfer time, that the stages' orders fit together (no stage waits for
// an operation another stage runs later: no deadlock) and leave exactly the
// theoretical bubble (pp-1)/(v*m + pp-1).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "core/error.hpp"
#include "parallel/pipeline/schedules.hpp"

using namespace exa::parallel;
using namespace exa::parallel::pipeline;

namespace {

std::string interleaved_order(int stage, int pp, int v, int m) {
  std::string t;
  for (const auto& op : make_schedule("interleaved", stage, pp, v)->ops(m))
    t += (op.kind == MicroBatchOp::Kind::Forward ? "F" : "B") + std::to_string(op.chunk) + ":" +
         std::to_string(op.micro) + " ";
  return t;
}

// Makespan of the step in unit time steps; -1 when the orders deadlock.
int simulated_makespan(int pp, int v, int m) {
  using Key = std::tuple<bool, int, int, int>;  // backward?, stage, chunk, micro
  std::vector<std::vector<MicroBatchOp>> ops;
  for (int r = 0; r < pp; ++r) ops.push_back(make_schedule("interleaved", r, pp, v)->ops(m));
  std::map<Key, int> finished;
  std::vector<std::size_t> next(std::size_t(pp), 0);
  std::vector<int> clock(std::size_t(pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      auto& i = next[std::size_t(r)];
      if (i == ops[std::size_t(r)].size()) continue;
      const auto& op = ops[std::size_t(r)][i];
      const int c = op.chunk, j = op.micro;
      const bool fwd = op.kind == MicroBatchOp::Kind::Forward;
      // A forward needs the previous (stage, chunk)'s; a backward the next
      // one's gradient, or, at the head, its own forward.
      bool none = false;
      Key dep;
      if (fwd) {
        none = r == 0 && c == 0;
        dep = r > 0 ? Key{false, r - 1, c, j} : Key{false, pp - 1, c - 1, j};
      } else {
        dep = r == pp - 1 && c == v - 1 ? Key{false, r, c, j}
                                         : r < pp - 1 ? Key{true, r + 1, c, j} : Key{true, 0, c + 1, j};
      }
      const auto d = finished.find(dep);
      if (!none && d == finished.end()) continue;
      auto& t = clock[std::size_t(r)];
      t = std::max(t, none ? 0 : d->second) + 1;
      finished[Key{!fwd, r, c, j}] = t;
      ++i;
      progress = true;
    }
  }
  for (int r = 0; r < pp; ++r)
    if (next[std::size_t(r)] != ops[std::size_t(r)].size()) return -1;
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace

TEST(InterleavedSchedule, OrderAtTwoStagesTwoChunks) {
  // Stage 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 chunk forwards, stage 1
  // with 2; backwards take the last chunk first.
  EXPECT_EQ(interleaved_order(0, 2, 2, 4),
            "F0:0 F0:1 F1:0 F1:1 F0:2 B1:0 F0:3 B1:1 F1:2 B0:0 F1:3 B0:1 B1:2 B1:3 B0:2 B0:3 ");
  EXPECT_EQ(interleaved_order(1, 2, 2, 4),
            "F0:0 F0:1 F1:0 B1:0 F1:1 B1:1 F0:2 B0:0 F0:3 B0:1 F1:2 B1:2 F1:3 B1:3 B0:2 B0:3 ");
}

TEST(InterleavedSchedule, StagesFitTogetherWithTheTheoreticalBubble) {
  for (int pp : {2, 4})
    for (int v : {2, 3})
      for (int m : {pp, 2 * pp, 4 * pp}) {
        const int span = simulated_makespan(pp, v, m);
        ASSERT_GT(span, 0) << "deadlock at pp " << pp << " v " << v << " m " << m;
        const int work = 2 * m * v;  // each stage's chunk forwards and backwards
        EXPECT_DOUBLE_EQ(double(span - work) / span, theoretical_bubble("interleaved", pp, m, v))
            << "pp " << pp << " v " << v << " m " << m;
        for (int s = 0; s < pp; ++s) {
          // Contexts alive: the warm-up's forwards plus the steady state's
          // one, all m*v when m = pp.
          const auto sched = make_schedule("interleaved", s, pp, v);
          const int warm = m == pp ? m * v : std::min((pp - s - 1) * 2 + (v - 1) * pp, m * v);
          EXPECT_EQ(check_schedule(sched->ops(m), m, sched->name(), v), std::min(warm + 1, m * v))
              << "pp " << pp << " v " << v << " m " << m << " stage " << s;
        }
      }
}

TEST(InterleavedSchedule, RefusesMicroBatchesNotInGroupsOfTheStages) {
  const auto s = make_schedule("interleaved", 0, 4, 2);
  for (int m : {2, 6}) EXPECT_THROW(s->ops(m), exa::Error) << m;
  EXPECT_THROW(make_schedule("interleaved", 0, 2, 1), exa::Error);
  EXPECT_THROW(make_schedule("1f1b", 0, 2, 2), exa::Error);
  EXPECT_DOUBLE_EQ(theoretical_bubble("interleaved", 4, 8, 2), 3.0 / 19.0);
}
