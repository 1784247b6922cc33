#pragma once
// Context parallelism in the model's seams (docs/architecture.md, "Context
// parallelism"): with grid cp > 1, build_model fills the CoreAttention seam
// with ring or all-to-all attention over the Cp group and, for
// moe.aux_scope = "sequence", the MoE layers' RoutingScope with a sum over
// that group.
#include <string>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "kernels/attention.hpp"
#include "model/seams/seams.hpp"

namespace exa::deck {
class Config;
}

namespace exa::parallel::context {

struct ContextOptions {
  std::string mode = "ring";       // parallel.cp_mode: "ring" or "a2a"
  bool aux_over_sequence = false;       // moe.aux_scope = "sequence"
  bool capacity_over_sequence = false;  // moe.capacity_scope = "sequence"
  std::int64_t seq_len = 0;             // model.seq_len
  comm::Backend backend = comm::Backend::Mpi;  // comm.backend: the ring's and the all-to-all's channel
  static ContextOptions from_deck(const deck::Config& cfg);
};

// Replaces s.attention (and sets s.routing) for the grid's Cp group.
// Collective over it (its communicator). No-op when cp = 1.
void use_context_parallel(model::Seams<float>& s, const comm::ProcessGrid& grid, const ContextOptions& opt,
                          kernels::AttentionTiles tiles);

}  // namespace exa::parallel::context
