#include "parallel/schedule.hpp"

#include <algorithm>

namespace exa::parallel {

std::vector<MicroBatchOp> SequentialSchedule::ops(int n_micro) const {
  std::vector<MicroBatchOp> ops;
  for (int j = 0; j < n_micro; ++j) {
    ops.push_back({MicroBatchOp::Kind::Forward, j});
    ops.push_back({MicroBatchOp::Kind::Backward, j});
  }
  return ops;
}

int check_schedule(const std::vector<MicroBatchOp>& ops, int n_micro, const std::string& name, int chunks) {
  EXA_REQUIRE(n_micro >= 1, "schedule '{}': a step needs at least one micro-batch, got {}", name, n_micro);
  // 0: not started, 1: forward done, 2: backward done; per (chunk, micro).
  std::vector<int> state(static_cast<std::size_t>(n_micro * chunks), 0);
  int alive = 0, most = 0;
  for (const auto& op : ops) {
    EXA_REQUIRE(op.micro >= 0 && op.micro < n_micro, "schedule '{}': micro-batch {} is outside [0, {})", name,
                op.micro, n_micro);
    EXA_REQUIRE(op.chunk >= 0 && op.chunk < chunks, "schedule '{}': chunk {} is outside [0, {})", name, op.chunk,
                chunks);
    int& s = state[static_cast<std::size_t>(op.chunk * n_micro + op.micro)];
    if (op.kind == MicroBatchOp::Kind::Forward) {
      EXA_REQUIRE(s == 0, "schedule '{}': micro-batch {} runs its forward twice", name, op.micro);
      s = 1;
      most = std::max(most, ++alive);
    } else {
      EXA_REQUIRE(s == 1, "schedule '{}': micro-batch {} runs a backward {}", name, op.micro,
                  s == 0 ? "before its forward" : "twice");
      s = 2;
      --alive;
    }
  }
  for (int k = 0; k < n_micro * chunks; ++k)
    EXA_REQUIRE(state[static_cast<std::size_t>(k)] == 2, "schedule '{}': micro-batch {} never runs its backward",
                name, k % n_micro);
  return most;
}

}  // namespace exa::parallel
