#pragma once
// Candidate: one parallel layout with its memory, precision and
// compression policies, as the planner weighs it and as deck settings
// (`overrides`) that make a run of it.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"

namespace exa::deck {
class Config;
}

namespace exa::plan {

struct Candidate {
  comm::GridSizes grid;  // world, tp, cp, dp (resolved), pp, ep, etp (0 = tp)
  bool sequence_parallel = false;
  int zero = 0;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string cp_mode = "ring";
  std::int64_t micro_batch = 1, grad_accum = 1;
  int round = 0;  // parallel.microbatches (0: grad_accum)
  std::string layers_per_stage = "auto";
  std::string recompute = "none", checkpoint_layers = "all";
  // memory.offload_experts (ZeRO 0 only), memory.offload_optimizer,
  // memory.offload_prefetch.
  bool offload_experts = false, offload_optimizer = false;
  int offload_prefetch = 2;
  std::string precision = "fp32";
  std::string compression = "none", weight_compression = "none", a2a_compression = "none";
  std::int64_t quant_block = 256;
  // parallel.hierarchical: the Data group's collectives in a node-local and
  // an inter-node stage (the ExpertData group's stay flat);
  // comm.hierarchical_a2a: the expert all-to-all's; comm.compress_scope:
  // "inter_node" encodes only the inter-node stage.
  bool hierarchical = false, hierarchical_a2a = false;
  std::string compress_scope = "all";
  double topk_ratio = 0.01;  // comm.topk_ratio (compression = "topk")
  // train.grad_projection = "pcgrad": the tasks projected between (0: none).
  int projection_tasks = 0;

  // The deck's own layout and policies for its world size.
  static Candidate from_deck(const deck::Config& cfg);
  // `--set` strings that turn a deck into this candidate.
  std::vector<std::string> overrides() const;
  // "dp 4 x tp 2 (sp) x pp 2 (1f1b, m 8) x ep 4, zero 1, bf16, recompute full".
  std::string describe() const;
  int etp() const { return grid.etp == 0 ? grid.tp : grid.etp; }
  int micro_per_round() const { return round > 0 ? round : int(grad_accum); }
};

}  // namespace exa::plan
