// The sequential schedule and the schedule executor: every micro-batch's
// backward receives the context its own forward returned, the last backward
// is flagged, and malformed operation lists are refused with the reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/schedule.hpp"

using namespace exa::parallel;
using K = MicroBatchOp::Kind;

namespace {
// Runs a fixed list (for testing the executor on orders other than sequential).
class Listed final : public Schedule {
 public:
  explicit Listed(std::vector<MicroBatchOp> ops) : ops_(std::move(ops)) {}
  std::string name() const override { return "listed"; }
  std::vector<MicroBatchOp> ops(int) const override { return ops_; }

 private:
  std::vector<MicroBatchOp> ops_;
};

std::vector<std::string> trace(const Schedule& s, int n) {
  std::vector<int> contexts(static_cast<std::size_t>(n));
  std::vector<std::string> t;
  run_schedule(
      s, n,
      [&](int j) -> int& {
        contexts[std::size_t(j)] = 100 + j;
        t.push_back("F" + std::to_string(j));
        return contexts[std::size_t(j)];
      },
      [&](int j, int& ctx, bool last) {
        EXPECT_EQ(ctx, 100 + j);
        t.push_back("B" + std::to_string(j) + (last ? "*" : ""));
      });
  return t;
}
}  // namespace

TEST(Schedule, SequentialRunsForwardThenBackwardPerMicroBatch) {
  const SequentialSchedule s;
  EXPECT_EQ(trace(s, 3), (std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2*"}));
  EXPECT_EQ(check_schedule(s.ops(3), 3, s.name()), 1);
}

TEST(Schedule, ExecutorKeepsSeveralContextsAlive) {
  const Listed l({{K::Forward, 0}, {K::Forward, 1}, {K::Backward, 1}, {K::Backward, 0}});
  EXPECT_EQ(trace(l, 2), (std::vector<std::string>{"F0", "F1", "B1", "B0*"}));
  EXPECT_EQ(check_schedule(l.ops(2), 2, l.name()), 2);
}

TEST(Schedule, MalformedListsAreRefused) {
  auto msg = [](std::vector<MicroBatchOp> ops, int n) {
    try {
      check_schedule(ops, n, "bad");
    } catch (const exa::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({{K::Backward, 0}, {K::Forward, 0}}, 1).find("micro-batch 0 runs a backward before its forward"),
            std::string::npos);
  EXPECT_NE(msg({{K::Forward, 0}}, 1).find("micro-batch 0 never runs its backward"), std::string::npos);
  EXPECT_NE(msg({{K::Forward, 0}, {K::Forward, 0}}, 1).find("runs its forward twice"), std::string::npos);
  EXPECT_NE(msg({{K::Forward, 2}}, 2).find("micro-batch 2 is outside [0, 2)"), std::string::npos);
  EXPECT_NE(msg({}, 0).find("at least one micro-batch"), std::string::npos);
}
