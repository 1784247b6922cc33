#pragma once
// One step's micro-batches through a Schedule: the code the Trainer and
// examoe-bench share (docs/architecture.md, "Activation contexts and
// schedules"). Each micro-batch is sampled and uploaded right before its
// forward (the model copies the tokens it needs into the activation
// context, so one device batch serves every micro-batch in flight) and its
// backward accumulates seed * d(loss)/d(params) into the gradients.
#include <cstdint>
#include <functional>

#include "core/types.hpp"
#include "io/sampler.hpp"
#include "model/stage_model.hpp"
#include "model/weights.hpp"
#include "parallel/pipeline/pipeline.hpp"
#include "parallel/schedule.hpp"
#include "train/device_batch.hpp"
#include "train/moe_load.hpp"

namespace exa::train {

// Sums over this rank's micro-batches of the step.
struct MicroBatchTotals {
  double loss = 0, ce = 0, aux = 0, z = 0;
  double imbalance = 1;  // worst MoE layer, max over micro-batches
  MoeLoad moe;           // expert loads summed over the micro-batches
  parallel::pipeline::PipelineStats pipeline;  // with a pipeline: this stage's step
};

// Phase regions around the parts (fenced when `fence`, so that device work
// is charged to the phase that launched it).
struct MicroBatchRegions {
  const char* io = "io/batch";
  const char* forward = "compute/forward";
  const char* backward = "compute/backward";
  bool fence = true;
};

struct MicroBatchStep {
  model::StageModel<float>& model;
  const parallel::Schedule& schedule;
  const model::Weights<float, Device>& weights;
  const model::Weights<float, Device>& grads;
  double backward_seed = 1;  // optim::GradAccumulation::backward_seed()
  DeviceBatch& batch;
  // Host batch of micro-batch j.
  std::function<io::Batch(std::int64_t j)> sample;
  // Before micro-batch j's backward; `last`: no other backward follows in
  // the step (data parallelism reduces then). May be empty.
  std::function<void(std::int64_t j, bool last)> before_backward;
  MicroBatchRegions regions{};
  // Pipeline parallelism: the stage that runs the step (its own schedule,
  // `schedule` unused). The totals are then over every stage: the losses
  // summed, the imbalance the worst, every MoE layer's load.
  parallel::pipeline::Pipeline* pipeline = nullptr;
};

MicroBatchTotals run_micro_batches(const MicroBatchStep& step, std::int64_t n_micro);

}  // namespace exa::train
