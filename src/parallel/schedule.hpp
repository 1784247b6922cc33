#pragma once
// Schedule: the order in which one stage runs a step's micro-batches through
// forward and backward (docs/architecture.md, "Activation contexts and
// schedules"). A schedule is a list of operations; run_schedule executes it
// on any model whose forward returns an activation context, keeping each
// micro-batch's context alive from its forward to its backward. Both step
// executors (parallel/step_executor.hpp) run their schedules through it: the
// local one the sequential schedule, forward then backward per micro-batch;
// the pipeline one GPipe, 1F1B, interleaved or zero-bubble.
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace exa::parallel {

struct MicroBatchOp {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int micro = 0;
  int chunk = 0;  // interleaved pipeline: the stage's model chunk (virtual stage); else 0
  bool operator==(const MicroBatchOp& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string name() const = 0;
  // This stage's operations for a step of n_micro micro-batches.
  virtual std::vector<MicroBatchOp> ops(int n_micro) const = 0;
};

// F0 B0 F1 B1 ...: one context alive at a time.
class SequentialSchedule final : public Schedule {
 public:
  std::string name() const override { return "sequential"; }
  std::vector<MicroBatchOp> ops(int n_micro) const override;
};

// exa::Error unless every micro-batch in [0, n_micro) runs one forward and,
// later, one backward, through each of `chunks` model chunks. Returns the
// most contexts alive at once.
int check_schedule(const std::vector<MicroBatchOp>& ops, int n_micro, const std::string& name, int chunks = 1);

// Where a backward stands in the step: `last`, no backward follows; and
// `last_of_chunk`, none of its model chunk follows (data parallelism
// reduces a chunk's layers then).
struct BackwardPosition {
  bool last = false;
  bool last_of_chunk = false;
};

// The one schedule runner, for every executor: runs `schedule`'s
// operations for n_micro micro-batches through `chunks` model chunks,
// keeping each (chunk, micro-batch)'s context alive from its forward to its
// backward:
//   forward(op)                    -> the context op's backward consumes
//   backward(op, context, position)
template <class Forward, class Backward>
void run_schedule(const Schedule& schedule, int n_micro, int chunks, Forward&& forward, Backward&& backward) {
  const auto ops = schedule.ops(n_micro);
  check_schedule(ops, n_micro, schedule.name(), chunks);
  using Ctx = decltype(&forward(ops.front()));
  std::vector<Ctx> alive(static_cast<std::size_t>(n_micro * chunks), nullptr);
  std::size_t last_backward = 0;
  std::vector<std::size_t> chunk_last(static_cast<std::size_t>(chunks), 0);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == MicroBatchOp::Kind::Backward) last_backward = chunk_last[std::size_t(ops[i].chunk)] = i;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    auto& slot = alive[static_cast<std::size_t>(op.chunk * n_micro + op.micro)];
    if (op.kind == MicroBatchOp::Kind::Forward) {
      slot = &forward(op);
    } else {
      backward(op, *slot, BackwardPosition{i == last_backward, i == chunk_last[std::size_t(op.chunk)]});
      slot = nullptr;
    }
  }
}

}  // namespace exa::parallel
