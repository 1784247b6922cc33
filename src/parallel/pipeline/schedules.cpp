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

std::unique_ptr<Schedule> make_schedule(const std::string& name, int stage, int stages) {
  EXA_REQUIRE(stage >= 0 && stage < stages, "pipeline: stage {} is not one of {} stages", stage, stages);
  if (name == "gpipe") return std::make_unique<GPipeSchedule>();
  if (name == "1f1b") return std::make_unique<OneFOneBSchedule>(stage, stages);
  if (name == "zb") return std::make_unique<ZeroBubbleSchedule>(stage, stages);
  throw Error(fmt::format("pipeline.schedule = \"{}\" does not exist; use \"gpipe\", \"1f1b\" or \"zb\"", name));
}

double theoretical_bubble(const std::string& name, int stages, int n_micro) {
  const double idle = double(stages - 1);
  return idle / ((name == "zb" ? 3.0 : 1.0) * double(n_micro) + idle);
}

}  // namespace exa::parallel::pipeline
