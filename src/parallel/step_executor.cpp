#include "parallel/step_executor.hpp"

#include "parallel/local_executor.hpp"
#include "parallel/pipeline/pipeline_executor.hpp"

namespace exa::parallel {

std::unique_ptr<StepExecutor> make_step_executor(const ParallelLayout& layout, StepTarget target,
                                                 std::int64_t micro_batch) {
  if (layout.pipelined()) return std::make_unique<pipeline::PipelineExecutor>(layout, target, micro_batch);
  return std::make_unique<LocalExecutor>(target);
}

}  // namespace exa::parallel
