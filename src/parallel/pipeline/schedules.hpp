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
//   interleaved  Megatron's interleaved 1F1B over v model chunks per stage:
//          micro-batches stream through chunk 0 of every stage, then chunk
//          1, ...; in groups of `stages` micro-batches, a warm-up of
//          (stages-stage-1)*2 + (v-1)*stages chunk forwards (all m*v when
//          m = stages), then one forward and one backward in turn, then the
//          remaining backwards (the last chunk's first). m must be a
//          multiple of stages.
//
// Bubble in theory, with equal F, B and W times: (stages-1) / (m + stages-1)
// for gpipe and 1f1b, (stages-1) / (3m + stages-1) for zb (ZB-H1 leaves
// (stages-1)(F+B-W) of idle time against 1f1b's (stages-1)(F+B+W)), and
// (stages-1) / (v*m + stages-1) for interleaved (the same (stages-1) idle
// slots, each a chunk's F+B, 1/v of a whole stage's).
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

class InterleavedSchedule final : public Schedule {
 public:
  InterleavedSchedule(int stage, int stages, int chunks) : stage_(stage), stages_(stages), chunks_(chunks) {}
  std::string name() const override { return "interleaved"; }
  // exa::Error unless n_micro is a positive multiple of the stages.
  std::vector<MicroBatchOp> ops(int n_micro) const override;
  int chunks() const { return chunks_; }

 private:
  int stage_, stages_, chunks_;
};

// pipeline.schedule by name (virtual_stages: interleaved's chunks per
// stage, 1 for the others); exa::Error naming the choices otherwise.
std::unique_ptr<Schedule> make_schedule(const std::string& name, int stage, int stages, int virtual_stages = 1);

// The schedule's idle share of a step in theory (above).
double theoretical_bubble(const std::string& name, int stages, int n_micro, int virtual_stages = 1);

}  // namespace exa::parallel::pipeline
