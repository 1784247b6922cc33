#pragma once
// StepExecutor: runs one training step's micro-batches through this rank's
// model and finishes its gradients (docs/architecture.md, "Layout and the
// step executor"). It is the one seam between the trainer and the parallel
// strategies, as Megatron-Core's forward-backward function and its
// finalize_model_grads are: the trainer samples, calls run(), then
// finalize_grads(), and hands norm_reduction() to the gradient clipper; it
// never asks which strategies are in play.
//
//   auto exec = make_step_executor(layout, {model, dp.weights(), dp.grads(), &dp});
//   const auto t = exec->run(work, grad_accum);   // forward + backward of every micro-batch
//   exec->finalize_grads();                       // data-parallel mean, tied embeddings
//   clipper.set_reduction(exec->norm_reduction());
//
// Two implementations share run_schedule (schedule.hpp): the local executor
// (one stage: the sequential schedule) and pipeline::PipelineExecutor (pp >
// 1: the stage's pipeline schedule, boundary tensors over the Pp group).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/reduction.hpp"
#include "core/types.hpp"
#include "model/forward_result.hpp"
#include "model/stage_model.hpp"
#include "model/weights.hpp"
#include "parallel/expert/moe_load.hpp"
#include "parallel/layout.hpp"

namespace exa::parallel {

namespace data {
class DataParallel;
}

// Phase regions around the parts of a micro-batch (fenced when `fence`, so
// that device work is charged to the phase that launched it).
struct StepRegions {
  const char* io = "io/batch";
  const char* forward = "compute/forward";
  const char* backward = "compute/backward";
  bool fence = true;
};

// What an executor runs on: this rank's model, the weights it reads and the
// gradients its backward accumulates into, and the data-parallel strategy
// that owns them (null: one replica whose gradients the caller zeroes, as
// the benchmark's).
struct StepTarget {
  model::StageModel<float>& model;
  const model::Weights<float, Device>& weights;
  const model::Weights<float, Device>& grads;
  data::DataParallel* data = nullptr;
};

// One step's (or one evaluation batch's) feed.
struct StepWork {
  // Micro-batch j's tokens and targets on the device: the caller samples
  // and uploads them (under regions.io). Only a stage holding the embedding
  // or the head asks, unless `documents`: then every stage does, as every
  // layer reads the documents of packed sequences.
  std::function<model::StageModel<float>::Input(int j)> input;
  double backward_seed = 1;  // optim::GradAccumulation::backward_seed()
  StepRegions regions{};
  int tasks = 1;  // the tasks the inputs name (StageModel::Input::task < tasks)
  // Micro-batch j's shape as this rank's model takes it ([B, T / cp]),
  // when micro-batches differ in shape (token budgets): pipeline stages
  // without the embedding size their boundary buffers by it. Empty: every
  // micro-batch has the executor's shape.
  std::function<model::MicroBatchShape(int j)> shape;
  bool documents = false;
};

// A step's sums over this rank's micro-batches, over every pipeline stage
// (each stage adds the losses of its layers: ce on the last, aux and z where
// the MoE layers are).
struct StepTotals {
  double loss = 0, ce = 0, aux = 0, z = 0, distill = 0;
  double imbalance = 1;  // worst MoE layer, max over the micro-batches and stages
  // Every MoE layer's expert loads, summed over the micro-batches and the
  // data-parallel group: the same on every rank.
  expert::MoeLoad moe;
  // Per task: the cross-entropy summed over its valid targets, and their
  // count ([2 * tasks], summed over the stages; not yet over data ranks).
  std::vector<double> task_sums;

  // Adds one micro-batch's losses on this stage and keeps the worse imbalance.
  void add_losses(const model::ForwardResult& r) {
    loss += r.loss.loss;
    ce += r.loss.ce;
    aux += r.loss.aux;
    z += r.loss.z;
    distill += r.loss.distill;
    imbalance = std::max(imbalance, r.max_imbalance());
    if (r.n_valid > 0 && std::size_t(2 * r.task + 1) < task_sums.size()) {
      task_sums[std::size_t(2 * r.task)] += r.ce_sum;
      task_sums[std::size_t(2 * r.task + 1)] += double(r.n_valid);
    }
  }
  // Adds another part of the step (a gradient-projection round's totals).
  void merge(const StepTotals& o) {
    loss += o.loss;
    ce += o.ce;
    aux += o.aux;
    z += o.z;
    distill += o.distill;
    imbalance = std::max(imbalance, o.imbalance);
    moe.merge(o.moe);
    if (task_sums.size() < o.task_sums.size()) task_sums.resize(o.task_sums.size(), 0.0);
    for (std::size_t i = 0; i < o.task_sums.size(); ++i) task_sums[i] += o.task_sums[i];
  }
};

// An evaluation batch's cross-entropy: the sum over valid targets and their
// count, over every stage (not yet over the data-parallel group).
struct EvalTotals {
  double ce_sum = 0;
  std::int64_t n_valid = 0;
};

// An executor's own measurements of its last step, for the step record and
// the log line; `record` null and `line` empty when it has none.
struct StepStats {
  std::string key;        // the record's key for `record`
  nlohmann::json record;  // merged into the metrics.jsonl step record
  std::string line;       // appended to the log line
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Zeroes the gradients (the data-parallel strategy's begin_step), runs the
  // forward and backward of micro-batches 0..n_micro-1 (backward seeding
  // work.backward_seed * d(loss)/d(params) into the gradients) and says
  // when the last backward comes (data parallelism reduces then).
  virtual StepTotals run(const StepWork& work, int n_micro) = 0;
  // Forward only (evaluation): each micro-batch's mean cross-entropy.
  virtual EvalTotals forward_only(const StepWork& work, int n_micro) = 0;
  // Every gradient reduction of the step finished: the data-parallel mean
  // of this rank's part, and the tied embedding summed over the pipeline
  // stages that hold it.
  virtual void finalize_grads() = 0;
  // The gradient norm's reduction over the whole model, each part counted
  // once (data, tensor and sequence parallel parts, every stage); empty
  // when there is nothing to reduce over (the identity).
  virtual Reduction norm_reduction() = 0;
  // The last step's measurements. Collective over the executor's ranks.
  virtual StepStats stats() = 0;
  // What the executor does, for the log at start-up; empty: nothing to say.
  virtual std::string describe(int n_micro) const = 0;
};

// The only place that chooses: a pipeline::PipelineExecutor when the layout
// has pipeline stages, else the local executor. `micro_batch`: sequences
// per micro-batch (the pipeline's boundary tensors are sized by it).
std::unique_ptr<StepExecutor> make_step_executor(const ParallelLayout& layout, StepTarget target, std::int64_t micro_batch);

}  // namespace exa::parallel
