#pragma once
// The data-parallel strategy's options (parallel/data/data_parallel.hpp).
#include <cstdint>
#include <string>

#include "comm/hierarchical.hpp"
#include "kernels/topk_codec.hpp"
#include "kernels/wire_codec.hpp"

namespace exa::deck {
class Config;
}

namespace exa::parallel::data {

struct DataParallelOptions {
  int zero = 0;
  bool hierarchical = false;
  bool overlap = true;
  double bucket_bytes = 25.0 * 1024 * 1024;
  comm::Backend backend = comm::Backend::Mpi;
  // The gradient collectives' and the parameter allgathers' wire formats
  // (F32: uncompressed).
  kernels::WireCodec compression, weight_compression;
  // comm.compression = "topk": its ratio (disabled otherwise), and the dense
  // steps before it starts (comm.topk_warmup).
  kernels::TopkCodec topk;
  std::int64_t topk_warmup = 0;
  // comm.compress_scope = "inter_node": with hierarchical collectives only
  // their inter-node stage is compressed (the flat expert-data collectives,
  // which have no inter-node stage of their own, then stay exact).
  bool inter_node_only = false;
  std::uint64_t seed = 0;  // the run's (stochastic rounding's keys)
  // memory.offload_experts: the routed experts' values and gradients live
  // in a file under offload_dir (model/expert_offload.hpp), offload_prefetch
  // layers brought in ahead in backward.
  bool offload_experts = false;
  std::string offload_dir;
  int offload_prefetch = 2;
  // The layout defers weight gradients (pipeline.schedule = "zb"): under
  // zero 2/3 the engines keep buffers for them. Set from the layout, not
  // the deck.
  bool deferred_weights = false;
  // parallel.zero, parallel.hierarchical, comm.overlap, comm.bucket_mb, comm.backend,
  // comm.compression, comm.topk_ratio, comm.topk_warmup, comm.compress_scope, comm.weight_compression,
  // comm.quant_block,
  // comm.stochastic_rounding, train.seed, memory.offload_experts, memory.offload_dir,
  // memory.offload_prefetch.
  static DataParallelOptions from_deck(const deck::Config& cfg);
};

}  // namespace exa::parallel::data
