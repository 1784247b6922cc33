// Context parallelism at long sequences, by accounting (never timing):
// a tiny model at T = 4096 split over cp = world-size ranks. (1) The
// attention activations a rank keeps for its backward (q, k, v, out, lse of
// every layer, from the model's own activation context) are at most
// 1/cp + 5% of the single-rank model's: <= 30% at cp = 4. (2) The causal
// work of the ring, the (query, key) score pairs each rank's kernels
// computed, is balanced by the zigzag split: every rank within 5% of the
// mean, and the ranks together compute exactly the causal T(T+1)/2 pairs
// per head. The counts are printed. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_model.hpp"
#include "model/weights.hpp"
#include "parallel/build_model.hpp"
#include "parallel/context/ring_attention.hpp"

namespace {

using exa::index_t;
constexpr index_t kT = 4096;

exa::model::ModelConfig tiny() {
  exa::model::ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.seq_len = kT;
  c.n_experts = 2;
  c.top_k = 1;
  c.d_expert = 16;
  return c;
}

// Bytes of the attention activations the forward kept.
double attention_bytes(const exa::model::StageContext<float>& c) {
  double n = 0;
  for (const auto& l : c.layers)
    n += double(l.q.span() + l.k.span() + l.v.span() + l.attn_o.span() + l.attn_lse.span()) * sizeof(float);
  return n;
}

Kokkos::View<std::int32_t**, exa::Layout, exa::Device> tokens(index_t T) {
  Kokkos::View<std::int32_t**, exa::Layout, exa::Device> t("tokens", 1, T);
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<exa::ExecSpace>(0, T), KOKKOS_LAMBDA(const index_t i) { t(0, i) = (i * 7) % 64; });
  return t;
}

TEST(ContextAccounting, AttentionActivationsShrinkWithCp) {
  int rank = 0, cp = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &cp);
  const auto cfg = tiny();
  exa::model::ParameterStore store(exa::model::parameter_specs(cfg));
  store.initialize(7);
  const auto w = exa::model::bind_values(cfg, store);

  double single = 0;
  if (rank == 0) {
    exa::model::StageModel<float> whole(cfg);
    const auto t = tokens(kT);
    auto& c = whole.forward(w, {t, t});
    single = attention_bytes(c);
    whole.release(c);
  }
  MPI_Bcast(&single, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  exa::comm::GridSizes gs;
  gs.cp = cp;
  const exa::parallel::ParallelLayout layout(exa::comm::ProcessGrid(gs, MPI_COMM_WORLD), cfg);
  const auto model = exa::parallel::build_model(layout);
  const auto t = tokens(kT / cp);  // any tokens: the sizes are what is counted
  auto& c = model->forward(w, {t, t});
  double mine = attention_bytes(c);
  model->release(c);
  double worst = mine;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("T = %lld: attention activations per rank %.0f KiB at cp = %d, %.0f KiB on one rank (%.1f%%)\n",
                static_cast<long long>(kT), worst / 1024, cp, single / 1024, 100.0 * worst / single);
  EXPECT_LE(worst, (1.0 / cp + 0.05) * single);
}

TEST(ContextAccounting, RingCausalWorkIsBalanced) {
  int rank = 0, cp = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &cp);
  const index_t H = 2, hd = 8, Tl = kT / cp;
  using A4 = Kokkos::View<float****, exa::Layout, exa::Device>;
  A4 q("q", 1, Tl, H, hd), k("k", 1, Tl, H, hd), v("v", 1, Tl, H, hd), o("o", 1, Tl, H, hd);
  Kokkos::View<float***, exa::Layout, exa::Device> lse("lse", 1, H, Tl);
  exa::parallel::context::RingAttention<float> ring(exa::comm::make_mpi_communicator(MPI_COMM_WORLD));
  ring.forward(q, k, v, o, lse, {});
  std::vector<std::int64_t> pairs(cp);
  const std::int64_t mine = ring.causal_pairs();
  MPI_Allgather(&mine, 1, MPI_INT64_T, pairs.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  std::int64_t total = 0;
  for (auto p : pairs) total += p;
  const double mean = double(total) / cp;
  if (rank == 0) {
    std::printf("T = %lld, cp = %d: causal FLOPs per rank (forward, 4*hd per pair):", static_cast<long long>(kT), cp);
    for (auto p : pairs) std::printf(" %.4g", double(p) * 4 * hd);
    // For contrast, a contiguous split (rank r holding rows [r L, (r+1) L)).
    std::printf("\n  a contiguous split would give:");
    const double L = double(Tl);
    for (int r = 0; r < cp; ++r) std::printf(" %.4g", H * (L * r * L + L * (L + 1) / 2) * 4 * hd);
    std::printf("\n");
  }
  EXPECT_EQ(total, H * kT * (kT + 1) / 2);
  for (auto p : pairs) EXPECT_LE(std::abs(double(p) - mean), 0.05 * mean);
}

}  // namespace
