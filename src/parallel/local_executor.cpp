#include "parallel/local_executor.hpp"

#include <algorithm>

#include "core/profiling.hpp"
#include "parallel/data/data_parallel.hpp"

namespace exa::parallel {

StepTotals LocalExecutor::run(const StepWork& w, int n_micro) {
  StepTotals t;
  t.task_sums.assign(std::size_t(2 * w.tasks), 0.0);
  if (t_.data) t_.data->begin_step();
  const auto& rg = w.regions;
  run_schedule(
      schedule_, n_micro, 1,
      [&](const MicroBatchOp& op) -> model::StageContext<float>& {
        model::StageModel<float>::Input in;
        {
          ScopedRegion io(rg.io, rg.fence);
          in = w.input(op.micro);
        }
        ScopedRegion region(rg.forward, rg.fence);
        auto& c = t_.model.forward(t_.weights, in);
        t.add_losses(c.result);
        t.moe.add(c.result.routing);
        return c;
      },
      [&](const MicroBatchOp&, model::StageContext<float>& c, BackwardPosition at) {
        if (t_.data) t_.data->set_sync(at.last);
        ScopedRegion region(rg.backward, rg.fence);
        t_.model.backward(c, t_.weights, t_.grads, w.backward_seed);
      });
  if (t_.data) t.moe.sum_over(t_.data->data_comm());
  return t;
}

EvalTotals LocalExecutor::forward_only(const StepWork& w, int n_micro) {
  EvalTotals e;
  for (int j = 0; j < n_micro; ++j) {
    const auto in = w.input(j);
    if (ce_.extent(0) != in.tokens.span()) ce_ = decltype(ce_)("exa::eval_ce", in.tokens.span());
    const auto s = t_.model.eval(t_.weights, in, in.targets, ce_);  // `in` may ask for soft targets
    e.ce_sum += s.loss_sum;
    e.n_valid += s.n_valid;
  }
  return e;
}

void LocalExecutor::finalize_grads() {
  if (t_.data) t_.data->finish_gradients();
}

Reduction LocalExecutor::norm_reduction() { return t_.data ? t_.data->norm_reduction() : Reduction(); }

}  // namespace exa::parallel
