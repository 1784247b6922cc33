#include "train/micro_batches.hpp"

#include <algorithm>

#include "core/profiling.hpp"

namespace exa::train {

MicroBatchTotals run_micro_batches(const MicroBatchStep& s, std::int64_t n_micro) {
  MicroBatchTotals t;
  parallel::run_schedule(
      s.schedule, static_cast<int>(n_micro),
      [&](int j) -> model::StageContext<float>& {
        {
          ScopedRegion io(s.regions.io, s.regions.fence);
          s.batch.upload(s.sample(j));
        }
        ScopedRegion region(s.regions.forward, s.regions.fence);
        typename model::StageModel<float>::Input in;
        in.tokens = s.batch.inputs;
        in.targets = s.batch.targets;
        auto& c = s.model.forward(s.weights, in);
        const auto& r = c.result;
        t.loss += r.loss.loss;
        t.ce += r.loss.ce;
        t.aux += r.loss.aux;
        t.z += r.loss.z;
        t.imbalance = std::max(t.imbalance, r.max_imbalance());
        t.moe.add(r.routing);
        return c;
      },
      [&](int j, model::StageContext<float>& c, bool last) {
        if (s.before_backward) s.before_backward(j, last);
        ScopedRegion region(s.regions.backward, s.regions.fence);
        s.model.backward(c, s.weights, s.grads, s.backward_seed);
      });
  return t;
}

}  // namespace exa::train
