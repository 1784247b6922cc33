#include "train/micro_batches.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/profiling.hpp"

namespace exa::train {

namespace {

void add_losses(MicroBatchTotals& t, const model::ForwardResult& r) {
  t.loss += r.loss.loss;
  t.ce += r.loss.ce;
  t.aux += r.loss.aux;
  t.z += r.loss.z;
  t.imbalance = std::max(t.imbalance, r.max_imbalance());
}

void add(MicroBatchTotals& t, const model::ForwardResult& r) {
  add_losses(t, r);
  t.moe.add(r.routing);
}

MicroBatchTotals run_pipeline(const MicroBatchStep& s, std::int64_t n_micro) {
  MicroBatchTotals t;
  auto& p = *s.pipeline;
  std::vector<std::vector<model::LayerRouting>> routing(static_cast<std::size_t>(n_micro));
  // parallel.microbatches < grad_accum: the step's micro-batches go through
  // in rounds, each a whole pipeline pass (fewer contexts alive, one bubble
  // a round); the gradients accumulate over all of them, and data
  // parallelism reduces after the final round's last backward only.
  const int m = p.round_size(static_cast<int>(n_micro));
  EXA_REQUIRE(n_micro % m == 0, "pipeline: rounds of {} micro-batches do not divide the step's {}", m, n_micro);
  for (int first = 0; first < n_micro; first += m) {
    const bool final_round = first + m >= n_micro;
    parallel::pipeline::Pipeline::Step step{
        s.model, s.weights, s.grads, s.backward_seed,
        [&](int j) {
          ScopedRegion io(s.regions.io, s.regions.fence);
          s.batch.upload(s.sample(first + j));
          model::StageModel<float>::Input in;
          in.tokens = s.batch.inputs;
          in.targets = s.batch.targets;
          return in;
        },
        [&](int j, const model::StageContext<float>& c) {
          // An interleaved stage's chunks each route their own MoE layers:
          // one micro-batch's, in chunk (= layer) order.
          add_losses(t, c.result);
          auto& r = routing[std::size_t(first + j)];
          r.insert(r.end(), c.result.routing.begin(), c.result.routing.end());
        },
        s.before_backward ? [&](int j, bool last) { s.before_backward(first + j, last && final_round); }
                          : std::function<void(int, bool)>()};
    t.pipeline.add_round(p.run(step, m));
  }
  for (const auto& r : routing) t.moe.add(r);
  // The stages' parts of the losses (ce on the last, aux and z where the
  // MoE layers are) and loads: one fixed-size message each, on every stage.
  double parts[4] = {t.loss, t.ce, t.aux, t.z};
  p.sum(parts, 4);
  t.loss = parts[0];
  t.ce = parts[1];
  t.aux = parts[2];
  t.z = parts[3];
  t.imbalance = p.max(t.imbalance);
  t.moe.gather_stages(p.pp_comm(), s.model.config());
  return t;
}

}  // namespace

MicroBatchTotals run_micro_batches(const MicroBatchStep& s, std::int64_t n_micro) {
  if (s.pipeline) return run_pipeline(s, n_micro);
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
        add(t, c.result);
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
