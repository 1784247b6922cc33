#include "plan/candidate.hpp"

#include <fmt/format.h>

#include "core/deck/micro_batch.hpp"
#include "core/deck/config.hpp"

namespace exa::plan {

Candidate Candidate::from_deck(const deck::Config& cfg) {
  Candidate c;
  c.grid = comm::resolve_grid_sizes([&] {
    auto s = comm::grid_sizes_from_deck(cfg);
    s.world = cfg.layout_world_size();
    return s;
  }());
  c.sequence_parallel = cfg.get_bool("parallel.sequence_parallel");
  c.zero = int(cfg.get_int("parallel.zero"));
  c.schedule = cfg.get_string("pipeline.schedule");
  c.virtual_stages = int(cfg.get_int("pipeline.virtual_stages"));
  c.cp_mode = cfg.get_string("parallel.cp_mode");
  c.micro_batch = deck::micro_batch_sequences(cfg);
  c.grad_accum = cfg.get_int("train.grad_accum");
  c.round = int(cfg.get_int("parallel.microbatches"));
  c.layers_per_stage = cfg.get_string("pipeline.layers_per_stage");
  c.recompute = cfg.get_string("memory.recompute");
  c.checkpoint_layers = cfg.get_string("memory.checkpoint_layers");
  c.offload_experts = cfg.get_bool("memory.offload_experts");
  c.offload_optimizer = cfg.get_bool("memory.offload_optimizer");
  c.offload_prefetch = int(cfg.get_int("memory.offload_prefetch"));
  c.precision = cfg.get_string("precision.compute");
  c.compression = cfg.get_string("comm.compression");
  c.weight_compression = cfg.get_string("comm.weight_compression");
  c.a2a_compression = cfg.get_string("comm.a2a_compression");
  c.quant_block = cfg.get_int("comm.quant_block");
  c.hierarchical = cfg.get_bool("parallel.hierarchical");
  c.hierarchical_a2a = cfg.get_bool("comm.hierarchical_a2a");
  c.compress_scope = cfg.get_string("comm.compress_scope");
  c.topk_ratio = cfg.get_float("comm.topk_ratio");
  if (cfg.get_string("train.grad_projection") == "pcgrad")
    c.projection_tasks = int(deck::stream_tasks(cfg.streams()).size());
  return c;
}

std::vector<std::string> Candidate::overrides() const {
  std::vector<std::string> o = {
      fmt::format("parallel.dp={}", grid.dp),
      fmt::format("parallel.tp={}", grid.tp),
      fmt::format("parallel.pp={}", grid.pp),
      fmt::format("parallel.cp={}", grid.cp),
      fmt::format("parallel.ep={}", grid.ep),
      fmt::format("parallel.etp={}", grid.etp),
      fmt::format("parallel.sequence_parallel={}", sequence_parallel ? "true" : "false"),
      fmt::format("parallel.zero={}", zero),
      fmt::format("parallel.microbatches={}", round),
      fmt::format("parallel.cp_mode={}", cp_mode),
      fmt::format("pipeline.schedule={}", schedule),
      fmt::format("pipeline.virtual_stages={}", virtual_stages),
      fmt::format("pipeline.layers_per_stage={}", layers_per_stage),
      fmt::format("train.micro_batch={}", micro_batch),
      fmt::format("train.grad_accum={}", grad_accum),
      fmt::format("memory.recompute={}", recompute),
      fmt::format("memory.checkpoint_layers={}", checkpoint_layers),
      fmt::format("memory.offload_experts={}", offload_experts ? "true" : "false"),
      fmt::format("memory.offload_optimizer={}", offload_optimizer ? "true" : "false"),
      fmt::format("precision.compute={}", precision),
      fmt::format("comm.compression={}", compression),
      fmt::format("comm.weight_compression={}", weight_compression),
      fmt::format("comm.a2a_compression={}", a2a_compression),
      fmt::format("parallel.hierarchical={}", hierarchical ? "true" : "false"),
      fmt::format("comm.hierarchical_a2a={}", hierarchical_a2a ? "true" : "false"),
      fmt::format("comm.compress_scope={}", compress_scope),
  };
  return o;
}

std::string Candidate::describe() const {
  std::string s = fmt::format("dp {}", grid.dp);
  if (grid.tp > 1) {
    s += fmt::format(" x tp {}{}", grid.tp, sequence_parallel ? " (sp)" : "");
    if (etp() != grid.tp) s += fmt::format(" etp {}", etp());
  }
  if (grid.cp > 1) s += fmt::format(" x cp {} ({})", grid.cp, cp_mode);
  if (grid.pp > 1)
    s += fmt::format(" x pp {} ({}{}, m {})", grid.pp, schedule,
                     virtual_stages > 1 ? fmt::format(" v{}", virtual_stages) : std::string(), micro_per_round());
  if (grid.ep > 1) s += fmt::format(", ep {}{}", grid.ep, hierarchical_a2a ? " (hierarchical a2a)" : "");
  s += fmt::format(", zero {}{}, mb {} x {}", zero, hierarchical ? " (hierarchical)" : "", micro_batch, grad_accum);
  if (precision != "fp32") s += ", " + precision;
  if (recompute != "none")
    s += fmt::format(", recompute {}{}", recompute, checkpoint_layers != "all" ? "/" + checkpoint_layers : std::string());
  if (offload_experts) s += offload_optimizer ? ", offload experts+optim" : ", offload experts";
  if (compression != "none") s += ", grads " + compression;
  if (weight_compression != "none") s += ", weights " + weight_compression;
  if (a2a_compression != "none") s += ", a2a " + a2a_compression;
  if (compress_scope != "all") s += ", compressed inter-node only";
  return s;
}

}  // namespace exa::plan
