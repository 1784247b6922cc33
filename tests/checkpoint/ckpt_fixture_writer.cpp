// Writes a small checkpoint for check_checkpoint_h5py.py: a deck with every
// model option (MoE and dense layers, a shared expert, GQA, untied head),
// the parameters split unevenly over the ranks, AdamW moments, and the
// deck and resolved configuration stored as attributes.
//
//   mpiexec -n 2 ckpt_fixture_writer <ckpt_dir>
#include <cstdio>
#include <string>

#include "comm/mpi_env.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"

namespace {

const char* kDeck = R"(# checkpoint fixture deck
[model]
vocab_size = 32
d_model = 16
n_layers = 2
n_heads = 4
n_kv_heads = 2
d_ff = 24
seq_len = 16

[moe]
n_experts = 4
top_k = 2
d_expert = 8
moe_every = 2
n_shared_experts = 1

[parallel]
dp = 0
)";

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  if (argc != 2) {
    if (mpi.rank() == 0) std::fprintf(stderr, "usage: ckpt_fixture_writer CKPT_DIR\n");
    return 2;
  }
  try {
    const auto cfg = exa::deck::Config::from_text(kDeck, "fixture.toml", {}, mpi.size());
    const auto mc = exa::model::ModelConfig::from_deck(cfg);
    auto specs = exa::model::parameter_specs(mc);
    std::vector<exa::model::Shard> shards;
    for (const auto& s : specs) {  // rank r holds an uneven r-th slice
      const std::int64_t n = s.numel();
      auto cut = [&](int k) { return k == 0 ? 0 : (k >= mpi.size() ? n : (n * (2 * k + 1)) / (2 * mpi.size())); };
      shards.push_back({cut(mpi.rank()), cut(mpi.rank() + 1) - cut(mpi.rank())});
    }
    exa::model::ParameterStore params(specs, shards);
    params.initialize(42);
    exa::io::OptimizerState optim;
    for (std::size_t i = 0; i < params.size(); ++i) {
      exa::io::OptimizerMoments m{exa::View1<float>("m", shards[i].count), exa::View1<float>("v", shards[i].count)};
      Kokkos::deep_copy(m.exp_avg, 0.5f);
      Kokkos::deep_copy(m.exp_avg_sq, 0.25f);
      optim[specs[i].name] = m;
    }
    exa::io::CheckpointMeta meta;
    meta.step = 3;
    meta.tokens_seen = 3 * 16 * 4;
    meta.data_cursor = 12;
    meta.rng_state = {1, 2, 3};
    meta.lr_schedule = {{"lr", 1e-3}, {"warmup_steps", 2}};
    meta.deck = cfg.deck_text();
    meta.config_json = cfg.to_json();
    meta.layout.world_size = mpi.size();
    meta.layout.dp = mpi.size();
    const auto dir = exa::io::save_checkpoint(argv[1], params, &optim, meta, MPI_COMM_WORLD);
    if (mpi.rank() == 0) std::printf("%s\n", dir.c_str());
  } catch (const exa::Error& e) {
    std::fprintf(stderr, "[rank %d] %s\n", mpi.rank(), e.what());
    return 1;
  }
  return 0;
}
