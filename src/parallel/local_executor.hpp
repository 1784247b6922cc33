#pragma once
// The step executor of a rank that holds every layer (no pipeline stages):
// the sequential schedule, one activation context alive at a time, with
// data, tensor, expert and context parallelism all inside the model's seams
// and the data-parallel strategy's hooks (parallel/step_executor.hpp).
#include "parallel/schedule.hpp"
#include "parallel/step_executor.hpp"

namespace exa::parallel {

class LocalExecutor final : public StepExecutor {
 public:
  explicit LocalExecutor(StepTarget target) : t_(target) {}

  StepTotals run(const StepWork& work, int n_micro) override;
  EvalTotals forward_only(const StepWork& work, int n_micro) override;
  void finalize_grads() override;
  Reduction norm_reduction() override;
  StepStats stats() override { return {}; }
  std::string describe(int) const override { return {}; }

 private:
  StepTarget t_;
  SequentialSchedule schedule_;
  Kokkos::View<float*, exa::Layout, Device> ce_;  // evaluation's per-token cross-entropy
};

}  // namespace exa::parallel
