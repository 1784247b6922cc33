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
      s, n, 1,
      [&](const MicroBatchOp& op) -> int& {
        contexts[std::size_t(op.micro)] = 100 + op.micro;
        t.push_back("F" + std::to_string(op.micro));
        return contexts[std::size_t(op.micro)];
      },
      [&](const MicroBatchOp& op, int& ctx, BackwardPosition at) {
        EXPECT_EQ(ctx, 100 + op.micro);
        EXPECT_EQ(at.last, at.last_of_chunk);  // one chunk
        t.push_back("B" + std::to_string(op.micro) + (at.last ? "*" : ""));
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

TEST(Schedule, RunnerFlagsEachChunksLastBackward) {
  // Two micro-batches through two chunks (an interleaved stage's order).
  const Listed l({{K::Forward, 0, 0}, {K::Forward, 0, 1}, {K::Forward, 1, 0}, {K::Backward, 0, 1},
                  {K::Forward, 1, 1}, {K::Backward, 1, 1}, {K::Backward, 0, 0}, {K::Backward, 1, 0}});
  std::vector<int> contexts(4);
  std::vector<std::string> t;
  run_schedule(
      l, 2, 2,
      [&](const MicroBatchOp& op) -> int& {
        int& c = contexts[std::size_t(op.chunk * 2 + op.micro)];
        c = 10 * op.chunk + op.micro;
        return c;
      },
      [&](const MicroBatchOp& op, int& ctx, BackwardPosition at) {
        EXPECT_EQ(ctx, 10 * op.chunk + op.micro);  // its own forward's context
        t.push_back("B" + std::to_string(op.micro) + "c" + std::to_string(op.chunk) + (at.last_of_chunk ? "+" : "") +
                    (at.last ? "*" : ""));
      });
  EXPECT_EQ(t, (std::vector<std::string>{"B0c1", "B1c1+", "B0c0", "B1c0+*"}));
}
