#include "parallel/pipeline/schedules.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::parallel::pipeline {

using Kind = MicroBatchOp::Kind;

std::vector<MicroBatchOp> GPipeSchedule::ops(int n_micro) const {
  std::vector<MicroBatchOp> ops;
  for (int j = 0; j < n_micro; ++j) ops.push_back({Kind::Forward, j});
  for (int j = 0; j < n_micro; ++j) ops.push_back({Kind::Backward, j});
  return ops;
}

std::vector<MicroBatchOp> OneFOneBSchedule::ops(int n_micro) const {
  const int warm = std::min(stages_ - stage_ - 1, n_micro);
  std::vector<MicroBatchOp> ops;
  for (int j = 0; j < warm; ++j) ops.push_back({Kind::Forward, j});
  for (int j = warm; j < n_micro; ++j) {
    ops.push_back({Kind::Forward, j});
    ops.push_back({Kind::Backward, j - warm});
  }
  for (int j = n_micro - warm; j < n_micro; ++j) ops.push_back({Kind::Backward, j});
  return ops;
}

std::vector<MicroBatchOp> InterleavedSchedule::ops(int n_micro) const {
  const int p = stages_, v = chunks_;
  EXA_REQUIRE(n_micro >= p && n_micro % p == 0,
              "pipeline: the interleaved schedule runs micro-batches in groups of the {} stages; {} is not a "
              "multiple of them (train.grad_accum)",
              p, n_micro);
  const int total = n_micro * v;
  // Virtual micro-batch k: the k-th chunk forward (or backward) this stage
  // runs. Groups of p*v: p micro-batches through chunk 0, then chunk 1, ...;
  // backwards take the chunks in reverse.
  auto op = [&](Kind kind, int k) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (kind == Kind::Backward) chunk = v - 1 - chunk;
    return MicroBatchOp{kind, (k / (p * v)) * p + in_group % p, chunk};
  };
  const int warm = n_micro == p ? total : std::min((p - stage_ - 1) * 2 + (v - 1) * p, total);
  std::vector<MicroBatchOp> ops;
  for (int k = 0; k < warm; ++k) ops.push_back(op(Kind::Forward, k));
  for (int k = 0; k < total - warm; ++k) {
    ops.push_back(op(Kind::Forward, warm + k));
    ops.push_back(op(Kind::Backward, k));
  }
  for (int k = total - warm; k < total; ++k) ops.push_back(op(Kind::Backward, k));
  return ops;
}

std::unique_ptr<Schedule> make_schedule(const std::string& name, int stage, int stages, int virtual_stages) {
  EXA_REQUIRE(stage >= 0 && stage < stages, "pipeline: stage {} is not one of {} stages", stage, stages);
  EXA_REQUIRE((name == "interleaved") == (virtual_stages > 1) && virtual_stages >= 1,
              "pipeline.schedule = \"{}\" with pipeline.virtual_stages = {}: only \"interleaved\" runs virtual "
              "stages, and it needs at least 2",
              name, virtual_stages);
  if (name == "interleaved") return std::make_unique<InterleavedSchedule>(stage, stages, virtual_stages);
  if (name == "gpipe") return std::make_unique<GPipeSchedule>();
  if (name == "1f1b") return std::make_unique<OneFOneBSchedule>(stage, stages);
  if (name == "zb") return std::make_unique<ZeroBubbleSchedule>(stage, stages);
  throw Error(fmt::format("pipeline.schedule = \"{}\" does not exist; use \"gpipe\", \"1f1b\" or \"zb\" (or "
                          "\"interleaved\" with pipeline.virtual_stages >= 2)",
                          name));
}

double theoretical_bubble(const std::string& name, int stages, int n_micro, int virtual_stages) {
  const double idle = double(stages - 1);
  const double work = name == "zb" ? 3.0 : name == "interleaved" ? double(virtual_stages) : 1.0;
  return idle / (work * double(n_micro) + idle);
}

}  // namespace exa::parallel::pipeline
