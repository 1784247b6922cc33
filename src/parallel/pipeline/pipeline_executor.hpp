#pragma once
// The step executor of a pipeline stage (parallel/step_executor.hpp): the
// stage's Pipeline runs the step's micro-batches in its schedule, in rounds
// of parallel.microbatches; the losses, the worst imbalance and the MoE
// loads are then combined over the stages, the tied embedding's gradient
// summed over the first and last, and the gradient norm reduced over the
// whole model. Its stats() are every stage's bubble, compute time and peak
// activations of the last step.
#include <memory>

#include "parallel/pipeline/pipeline.hpp"
#include "parallel/step_executor.hpp"

namespace exa::parallel::pipeline {

class PipelineExecutor final : public StepExecutor {
 public:
  // target.data must be given: the stage's parameters are its store.
  PipelineExecutor(const ParallelLayout& layout, StepTarget target, std::int64_t micro_batch);

  StepTotals run(const StepWork& work, int n_micro) override;
  EvalTotals forward_only(const StepWork& work, int n_micro) override;
  void finalize_grads() override;
  Reduction norm_reduction() override;
  StepStats stats() override;
  std::string describe(int n_micro) const override;

 private:
  StepTarget t_;
  Pipeline pipe_;
  PipelineStats last_;  // this stage's last step
  int last_micro_ = 0;  // that step's micro-batches
};

}  // namespace exa::parallel::pipeline
