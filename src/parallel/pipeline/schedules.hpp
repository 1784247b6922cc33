#pragma once
// Pipeline schedules (docs/architecture.md, "Pipeline parallelism"): the
// order in which stage `stage` of `stages` runs a step's micro-batches, as a
// parallel::Schedule the pipeline executor (pipeline.hpp) runs.
//
//   gpipe  F0 .. F(m-1), then B0 .. B(m-1): all m contexts alive at once.
//   1f1b   warm-up of stages-stage-1 forwards, then one forward and one
//          backward in turn, then the remaining backwards: at most
//          stages - stage contexts alive (PipeDream-Flush / Megatron).
//   zb     1f1b's order of forwards and backwards, each backward B only the
//          input gradient; its weight gradient W is deferred
//          (deferred_weights.hpp) and run where the stage would wait,
//          filling the cool-down bubble (ZB-H1: the same memory as 1f1b).
//
// Bubble in theory, with equal F, B and W times: (stages-1) / (m + stages-1)
// for gpipe and 1f1b, (stages-1) / (3m + stages-1) for zb (ZB-H1 leaves
// (stages-1)(F+B-W) of idle time against 1f1b's (stages-1)(F+B+W)).
#include <memory>
#include <string>

#include "parallel/schedule.hpp"

namespace exa::parallel::pipeline {

class GPipeSchedule final : public Schedule {
 public:
  std::string name() const override { return "gpipe"; }
  std::vector<MicroBatchOp> ops(int n_micro) const override;
};

class OneFOneBSchedule final : public Schedule {
 public:
  OneFOneBSchedule(int stage, int stages) : stage_(stage), stages_(stages) {}
  std::string name() const override { return "1f1b"; }
  std::vector<MicroBatchOp> ops(int n_micro) const override;

 private:
  int stage_, stages_;
};

class ZeroBubbleSchedule final : public Schedule {
 public:
  ZeroBubbleSchedule(int stage, int stages) : order_(stage, stages) {}
  std::string name() const override { return "zb"; }
  std::vector<MicroBatchOp> ops(int n_micro) const override { return order_.ops(n_micro); }

 private:
  OneFOneBSchedule order_;
};

// pipeline.schedule by name; exa::Error naming the choices otherwise.
std::unique_ptr<Schedule> make_schedule(const std::string& name, int stage, int stages);

// The schedule's idle share of a step in theory (above).
double theoretical_bubble(const std::string& name, int stages, int n_micro);

}  // namespace exa::parallel::pipeline
