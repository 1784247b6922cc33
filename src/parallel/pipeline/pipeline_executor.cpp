#include "parallel/pipeline/pipeline_executor.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/profiling.hpp"
#include "parallel/data/data_parallel.hpp"
#include "parallel/pipeline/schedules.hpp"

namespace exa::parallel::pipeline {

PipelineExecutor::PipelineExecutor(const ParallelLayout& layout, StepTarget target, std::int64_t micro_batch)
    : t_(target),
      pipe_(layout.grid(), layout.model(), layout.options().pipeline, layout.micro_batch_shape(micro_batch),
            layout.deferred_weights()) {
  EXA_REQUIRE(t_.data != nullptr, "pipeline: the stage executor needs the data-parallel strategy that owns its "
                                  "parameters");
}

StepTotals PipelineExecutor::run(const StepWork& w, int n_micro) {
  StepTotals t;
  t.task_sums.assign(std::size_t(2 * w.tasks), 0.0);
  t_.data->begin_step();
  std::vector<std::vector<model::LayerRouting>> routing(static_cast<std::size_t>(n_micro));
  // parallel.microbatches < grad_accum: the step's micro-batches go through
  // in rounds, each a whole pipeline pass (fewer contexts alive, one bubble
  // a round); the gradients accumulate over all of them, and data
  // parallelism reduces after the final round's last backward only.
  const int m = pipe_.round_size(n_micro);
  EXA_REQUIRE(n_micro % m == 0, "pipeline: rounds of {} micro-batches do not divide the step's {}", m, n_micro);
  last_ = PipelineStats{};
  for (int first = 0; first < n_micro; first += m) {
    const bool final_round = first + m >= n_micro;
    Pipeline::Step step{t_.model, t_.weights, t_.grads, w.backward_seed,
                        [&](int j) {
                          ScopedRegion io(w.regions.io, w.regions.fence);
                          return w.input(first + j);
                        },
                        [&](int j, const model::StageContext<float>& c) {
                          const auto& r = c.result;
                          t.add_losses(r);
                          // An interleaved stage's chunks each route their own MoE
                          // layers: one micro-batch's, in chunk (= layer) order.
                          auto& rt = routing[std::size_t(first + j)];
                          rt.insert(rt.end(), r.routing.begin(), r.routing.end());
                        },
                        [&](int, bool last) { t_.data->set_sync(last && final_round); }};
    if (w.shape) step.shape = [&](int j) { return w.shape(first + j); };
    step.input_everywhere = w.documents;
    last_.add_round(pipe_.run(step, m));
  }
  last_micro_ = n_micro;
  for (const auto& r : routing) t.moe.add(r);
  // The stages' parts of the losses (ce on the last, aux and z where the
  // MoE layers are, distillation on the last) and loads: one fixed-size message each, on every stage.
  double parts[5] = {t.loss, t.ce, t.aux, t.z, t.distill};
  pipe_.sum(parts, 5);
  t.loss = parts[0];
  t.ce = parts[1];
  t.aux = parts[2];
  t.z = parts[3];
  t.distill = parts[4];
  pipe_.sum(t.task_sums.data(), int(t.task_sums.size()));
  t.imbalance = pipe_.max(t.imbalance);
  t.moe.gather_stages(pipe_.pp_comm(), t_.model.config());
  t.moe.sum_over(t_.data->data_comm());
  return t;
}

EvalTotals PipelineExecutor::forward_only(const StepWork& w, int n_micro) {
  // Through the stages: the last one's forward gives each micro-batch's
  // mean cross-entropy over its valid targets.
  EvalTotals e;
  Pipeline::Step step{t_.model, t_.weights, t_.grads, 1.0, w.input};
  step.shape = w.shape;
  step.input_everywhere = w.documents;
  pipe_.forward_only(step, n_micro, [&](int, const model::StageContext<float>& c) {
    e.ce_sum += c.result.loss.ce * double(c.n_valid);
    e.n_valid += c.n_valid;
  });
  double both[2] = {e.ce_sum, double(e.n_valid)};  // only the last stage has counted
  pipe_.sum(both, 2);
  return {both[0], static_cast<std::int64_t>(both[1])};
}

void PipelineExecutor::finalize_grads() {
  t_.data->finish_gradients();
  pipe_.sum_tied_grads(t_.data->store());
}

Reduction PipelineExecutor::norm_reduction() {
  return pipe_.norm_reduction(t_.data->norm_reduction(), t_.data->store(), t_.data->part_sum());
}

StepStats PipelineExecutor::stats() {
  // Every stage's measurements of the last step.
  const int P = pipe_.stages();
  const double mine[4] = {last_.bubble(), last_.step_s - last_.wait_s, double(last_.peak_live),
                          double(last_.peak_activation_bytes)};
  std::vector<double> all(std::size_t(4 * P));
  MPI_Allgather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, pipe_.pp_comm());
  std::vector<double> bubble, compute, live, bytes;
  for (int k = 0; k < P; ++k) {
    bubble.push_back(all[std::size_t(4 * k)]);
    compute.push_back(all[std::size_t(4 * k + 1)]);
    live.push_back(all[std::size_t(4 * k + 2)]);
    bytes.push_back(all[std::size_t(4 * k + 3)]);
  }
  // Rounds of m micro-batches (parallel.microbatches): each fills and
  // drains the pipeline, so the theory is a round's.
  const int n = std::max(1, last_micro_);
  const int m = pipe_.round_size(n);
  const double theory = theoretical_bubble(pipe_.schedule().name(), P, m, pipe_.chunks());
  const double worst = *std::max_element(bubble.begin(), bubble.end());
  StepStats s;
  s.key = "pipeline";
  s.record = {{"schedule", pipe_.schedule().name()}, {"stages", P}, {"virtual_stages", pipe_.chunks()},
              {"micro_batches", m}, {"rounds", n / m}, {"bubble_theory", theory}, {"bubble", bubble},
              {"compute_s", compute}, {"peak_contexts", live}, {"activation_bytes", bytes}};
  s.line = fmt::format(" | pp bubble {:.3f} (theory {:.3f})", worst, theory);
  return s;
}

std::string PipelineExecutor::describe(int n_micro) const {
  std::string held;
  for (const auto& [a, b] : t_.model.plan().layer_ranges())
    held += fmt::format("{}[{}, {})", held.empty() ? "" : " ", a, b);
  const int m = pipe_.round_size(n_micro);
  return fmt::format(
      "pipeline parallel: pp {}, schedule {}, {} micro-batches per step{}; stage 0 holds layers {}; {} channels",
      pipe_.stages(), pipe_.schedule().name(), n_micro,
      m < n_micro ? fmt::format(" in {} rounds of {}", n_micro / m, m) : std::string(), held, pipe_.transport());
}

}  // namespace exa::parallel::pipeline
