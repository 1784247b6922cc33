#pragma once
// The benchmark's training step: one step exactly as Trainer::train_step
// does it at one rank (zero grads; the micro-batches through the same local
// step executor, parallel/local_executor.hpp; clip + AdamW), with the phase
// regions below around its parts. It is built here directly so that the
// phases can be fenced (exact per-phase times on asynchronous backends too)
// and nothing is written to a run directory.
#include <cstdint>
#include <utility>
#include <vector>

#include "core/deck/config.hpp"
#include "core/types.hpp"
#include "io/sampler.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_model.hpp"
#include "model/weights.hpp"
#include "optim/optimizer.hpp"
#include "parallel/local_executor.hpp"
#include "train/device_batch.hpp"

namespace exa::bench {

// Phase names of the step's own regions (the model's are forward/..., backward/...).
constexpr const char* kIo = "step/io";
constexpr const char* kForward = "step/forward";
constexpr const char* kBackward = "step/backward";
constexpr const char* kOptimizer = "step/optimizer";

struct Step {
  const deck::Config& cfg;
  model::ModelConfig mcfg;
  model::ParameterStore store;
  model::StageModel<float> model;
  model::Weights<float, Device> w, g;
  optim::Optimizer opt;
  io::Sampler sampler;
  std::int64_t micro_batch, grad_accum;
  train::DeviceBatch batch;
  parallel::LocalExecutor exec{{model, w, g}};
  std::vector<std::int32_t> tokens_log;  // every micro-batch's inputs then targets, for PyTorch

  explicit Step(const deck::Config& c);

  // Appends b's tokens to tokens_log.
  void log_tokens(const io::Batch& b);
  // Micro-batch j of optimizer step `step` (what Trainer::train_step reads at
  // one rank), logged.
  io::Batch sample(std::int64_t step, std::int64_t j);
  // Optimizer step `step`; returns (mean loss, worst imbalance).
  std::pair<double, double> run(std::int64_t step);
};

}  // namespace exa::bench
