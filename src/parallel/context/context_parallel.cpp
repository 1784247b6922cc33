#include "parallel/context/context_parallel.hpp"

#include <memory>

#include "comm/communicator.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "parallel/context/all_to_all_attention.hpp"
#include "parallel/context/ring_attention.hpp"

namespace exa::parallel::context {

ContextOptions ContextOptions::from_deck(const deck::Config& cfg) {
  ContextOptions o;
  o.mode = cfg.get_string("parallel.cp_mode");
  o.aux_over_sequence = cfg.get_string("moe.aux_scope") == "sequence";
  o.capacity_over_sequence = cfg.get_string("moe.capacity_scope") == "sequence";
  o.seq_len = cfg.get_int("model.seq_len");
  o.backend = comm::backend_named(cfg.get_string("comm.backend"));
  return o;
}

void use_context_parallel(model::Seams<float>& s, const comm::ProcessGrid& grid, const ContextOptions& opt,
                          kernels::AttentionTiles tiles) {
  const int cp = grid.size(comm::Group::Cp);
  if (cp == 1) return;
  // The attention's blocks move on comm.backend's channel (device memory
  // under NCCL); the routing statistics are host vectors, always on MPI.
  std::shared_ptr<comm::Communicator> c = comm::make_transport(grid.comm(comm::Group::Cp), opt.backend);
  if (opt.mode == "ring") {
    s.attention = std::make_shared<const RingAttention<float>>(c, tiles);
  } else if (opt.mode == "a2a") {
    s.attention = std::make_shared<const AllToAllAttention<float>>(c, s.attention, tiles);
  } else {
    throw Error(fmt::format("parallel.cp_mode = \"{}\" is not one of ring, a2a", opt.mode));
  }
  if (opt.aux_over_sequence || opt.capacity_over_sequence) {
    s.routing.ranks = cp;
    std::shared_ptr<comm::Communicator> sums = comm::make_mpi_communicator(grid.comm(comm::Group::Cp));
    s.routing.sum = [sums](std::vector<double>& v) { sums->allreduce(v.data(), v.data(), v.size()); };
    s.routing.aux = opt.aux_over_sequence;
    s.routing.capacity = opt.capacity_over_sequence;
    s.routing.rank = grid.coords().cp;
    s.routing.rows_per_sequence = opt.seq_len / cp;
  }
  log::info("context parallel: cp {}, {} attention, zigzag chunks {} and {} here; aux-loss statistics over {}; "
            "capacity over {}",
            cp, opt.mode, grid.coords().cp, 2 * cp - 1 - grid.coords().cp,
            opt.aux_over_sequence ? "the Cp group (moe.aux_scope = \"sequence\")" : "this rank's rows",
            opt.capacity_over_sequence ? "the Cp group (moe.capacity_scope = \"sequence\")" : "this rank's rows");
}

}  // namespace exa::parallel::context
