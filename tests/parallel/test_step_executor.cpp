// The step executor interface (parallel/step_executor.hpp), driven on a toy
// MoE model exactly as the trainer drives it: run, finalize_grads,
// norm_reduction, forward_only, stats.
//   - At one rank make_step_executor picks the local executor, and its step
//     equals the micro-batches run by hand through the model.
//   - At P ranks it picks the pipeline executor over P stages, and its
//     losses, gradient norm, evaluation and expert loads equal the local
//     executor's on the whole model (each rank runs that on MPI_COMM_SELF).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/process_grid.hpp"
#include "kernels/global_norm.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/weights.hpp"
#include "parallel/build_model.hpp"
#include "parallel/data/data_parallel.hpp"
#include "parallel/layout.hpp"
#include "parallel/step_executor.hpp"

using namespace exa;
using Tokens = Kokkos::View<std::int32_t**, exa::Layout, Device>;

namespace {

constexpr std::int64_t kB = 2;   // sequences per micro-batch
constexpr int kMicro = 4;        // micro-batches per step

model::ModelConfig toy() {
  model::ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 4;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_ff = 64;
  c.seq_len = 16;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 16;
  c.moe_every = 2;  // layers 1 and 3: a pipeline stage may hold none
  return c;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Micro-batch j's tokens (the same on every rank); targets are the next token.
struct Feed {
  Tokens tokens{"tokens", std::size_t(kB), std::size_t(toy().seq_len)};
  Tokens targets{"targets", std::size_t(kB), std::size_t(toy().seq_len)};
  model::StageModel<float>::Input operator()(int j) {
    auto ht = Kokkos::create_mirror_view(tokens);
    auto hg = Kokkos::create_mirror_view(targets);
    for (std::int64_t b = 0; b < kB; ++b)
      for (std::int64_t t = 0; t < toy().seq_len; ++t) {
        ht(b, t) = std::int32_t((j * 13 + b * 5 + t * 7) % 64);
        hg(b, t) = std::int32_t((j * 13 + b * 5 + (t + 1) * 7) % 64);
      }
    Kokkos::deep_copy(tokens, ht);
    Kokkos::deep_copy(targets, hg);
    model::StageModel<float>::Input in;
    in.tokens = tokens;
    in.targets = targets;
    return in;
  }
};

struct Outcome {
  parallel::StepTotals totals;
  double norm = 0;
  parallel::EvalTotals eval;
  parallel::StepStats stats;
};

// One step and one evaluation through make_step_executor on `sizes` over `comm`.
Outcome step_through(comm::GridSizes sizes, MPI_Comm comm) {
  const parallel::ParallelLayout layout(comm::ProcessGrid(sizes, comm), toy());
  parallel::data::DataParallel dp(layout);
  dp.initialize(7);
  auto model = parallel::build_model(layout);
  model->add_hooks(&dp);
  auto exec = parallel::make_step_executor(layout, {*model, dp.weights(), dp.grads(), &dp}, kB);
  Feed feed;
  const parallel::StepWork work{[&](int j) { return feed(j); }, 1.0 / kMicro};
  Outcome o;
  o.totals = exec->run(work, kMicro);
  exec->finalize_grads();
  const double local = dp.store().local_numel() > 0 ? kernels::global_sq_norm(dp.store().grads()) : 0.0;
  const auto reduce = exec->norm_reduction();  // empty: nothing to reduce over
  o.norm = std::sqrt(reduce ? reduce(local) : local);
  o.eval = exec->forward_only(work, kMicro);
  o.stats = exec->stats();
  return o;
}

std::int64_t routed_total(const parallel::expert::MoeLoad& m) {
  std::int64_t n = 0;
  for (const auto& l : m.layers()) n += std::accumulate(l.routed.begin(), l.routed.end(), std::int64_t{0});
  return n;
}

}  // namespace

TEST(StepExecutor, LocalStepIsTheMicroBatchesByHand) {
  const Outcome o = step_through({}, MPI_COMM_SELF);
  EXPECT_TRUE(o.stats.key.empty());  // the local executor has no measurements of its own

  // The same model and parameters, each micro-batch through forward and
  // backward by hand.
  model::ParameterStore store(model::parameter_specs(toy()));
  store.initialize(7);
  const auto w = model::bind_values(toy(), store);
  const auto g = model::bind_grads(toy(), store);
  store.zero_grads();
  model::StageModel<float> whole(toy());
  Feed feed;
  double loss = 0, ce = 0;
  for (int j = 0; j < kMicro; ++j) {
    auto& c = whole.forward(w, feed(j));
    loss += c.result.loss.loss;
    ce += c.result.loss.ce;
    whole.backward(c, w, g, 1.0 / kMicro);
  }
  EXPECT_DOUBLE_EQ(o.totals.loss, loss);
  EXPECT_DOUBLE_EQ(o.totals.ce, ce);
  EXPECT_NEAR(o.norm, std::sqrt(kernels::global_sq_norm(store.grads())), 1e-6 * o.norm);
  ASSERT_EQ(o.totals.moe.layers().size(), 2u);  // layers 1 and 3
  EXPECT_EQ(routed_total(o.totals.moe), 2 * kMicro * kB * toy().seq_len * toy().top_k);
  EXPECT_EQ(o.eval.n_valid, kMicro * kB * toy().seq_len);
  EXPECT_GT(o.eval.ce_sum, 0.0);
}

TEST(StepExecutor, PipelineStepEqualsTheLocalStep) {
  const int P = world_size();
  if (P == 1) GTEST_SKIP() << "a pipeline needs more than one rank (run at 2 and 4)";
  comm::GridSizes pipe;
  pipe.pp = P;
  const Outcome p = step_through(pipe, MPI_COMM_WORLD);
  const Outcome l = step_through({}, MPI_COMM_SELF);
  EXPECT_NEAR(p.totals.loss, l.totals.loss, 1e-5 * std::abs(l.totals.loss));
  EXPECT_NEAR(p.totals.ce, l.totals.ce, 1e-5 * std::abs(l.totals.ce));
  EXPECT_NEAR(p.totals.aux, l.totals.aux, 1e-5 * std::abs(l.totals.aux) + 1e-9);
  EXPECT_NEAR(p.totals.z, l.totals.z, 1e-5 * std::abs(l.totals.z) + 1e-9);
  EXPECT_NEAR(p.totals.imbalance, l.totals.imbalance, 1e-9);
  EXPECT_NEAR(p.norm, l.norm, 1e-5 * l.norm);
  EXPECT_EQ(p.eval.n_valid, l.eval.n_valid);
  EXPECT_NEAR(p.eval.ce_sum, l.eval.ce_sum, 1e-5 * l.eval.ce_sum);
  // Every stage holds every MoE layer's loads after the step.
  ASSERT_EQ(p.totals.moe.layers().size(), l.totals.moe.layers().size());
  for (std::size_t k = 0; k < l.totals.moe.layers().size(); ++k) {
    EXPECT_EQ(p.totals.moe.layers()[k].layer, l.totals.moe.layers()[k].layer);
    EXPECT_EQ(p.totals.moe.layers()[k].routed, l.totals.moe.layers()[k].routed);
  }
  ASSERT_EQ(p.stats.key, "pipeline");
  EXPECT_EQ(p.stats.record.at("stages").get<int>(), P);
  EXPECT_EQ(p.stats.record.at("bubble").size(), std::size_t(P));
  EXPECT_NE(p.stats.line.find("pp bubble"), std::string::npos);
}
