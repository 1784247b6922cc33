#pragma once
// The pipeline's timeline: every stage runs its own schedule's operations
// (parallel::pipeline::make_schedule, the lists the pipeline executor runs)
// in order, an operation starting when its stage is free and its input has
// arrived from the neighbouring stage. The step's span and the idle share
// (the bubble) come out of that simulation, so a schedule's bubble is the
// schedule code's, not a formula.
#include <string>
#include <vector>

namespace exa::plan {

struct OpTimes {
  double forward = 0;   // one chunk's forward of one micro-batch
  double backward = 0;  // its backward (input and weight gradients; zb: input only)
  double weight = 0;    // zb: the deferred weight gradient
  double p2p = 0;       // sending an activation (or its gradient) to the next stage
};

struct Timeline {
  double span = 0;    // first forward to last backward over all stages
  double busy = 0;    // the busiest stage's compute
  double bubble = 0;  // idle share of the span on that stage
};

// `times[s]` for each of the stages; chunks > 1 with "interleaved".
// zb's deferred weight gradients (parallel/pipeline/pipeline.cpp) fill a
// stage's waits for its input, or, with `fixed_w` (ZeRO 2/3, whose W
// enters collectives that every replica must enter alike), one runs before
// each operation that receives, whether or not its input has come. Either
// way a stage keeps at most pp - stage of them waiting, and runs every one
// left before its last backward.
Timeline simulate_pipeline(const std::string& schedule, const std::vector<OpTimes>& times, int n_micro,
                           int chunks = 1, bool fixed_w = false);

}  // namespace exa::plan
