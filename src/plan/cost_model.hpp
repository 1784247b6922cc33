#pragma once
// The cost model (docs/planner.md): a candidate layout's step on a cluster,
// from the model's FLOPs per rank and the cluster's calibrated rates, each
// collective's bytes (the bytes ledger's kinds, compressed where the
// candidate compresses) over the link its group spans, the overlap the
// executors have, the pipeline's simulated timeline and the memory model.
#include <array>
#include <string>

#include "model/model_config.hpp"
#include "plan/candidate.hpp"
#include "plan/cluster.hpp"
#include "plan/memory_model.hpp"
#include "plan/timeline.hpp"

namespace exa::plan {

// Forward + backward matmul FLOPs per token of the whole model by class;
// total() equals train::count_flops(cfg).per_token_train.
struct FlopsByClass {
  double attn_proj = 0, attn_core = 0, router = 0, experts = 0, shared = 0, dense = 0, head = 0;
  double adapters = 0;  // LoRA's adapters (the frozen matrices above count forward and input gradient only)
  double total() const { return attn_proj + attn_core + router + experts + shared + dense + head + adapters; }
};
FlopsByClass flops_per_token(const model::ModelConfig& cfg);

// Seconds of a step by what they are spent on, on the slowest stage.
struct StepCost {
  double compute = 0;     // matmuls, attention and element-wise kernels
  double tp = 0, a2a = 0, cp = 0, zero_gather = 0, pp_p2p = 0;  // exposed per kind
  double dp = 0;          // exposed gradient reduction (and ZeRO 1/2's parameter allgather)
  double bubble = 0;      // pipeline idle time
  double optimizer = 0;
  double offload = 0;     // memory.offload_experts: paging and writing the offloaded state back
  double step = 0;        // the whole step
  double tokens_per_s = 0;
  double mfu = 0;         // model FLOPs / (devices * peak of the precision)
  MemoryBytes memory;     // the worst stage
  bool fits = false;
  double memory_capacity = 0;  // bytes per device
  std::string bound;      // what bounds it: compute, tp, a2a, cp, zero, pp_p2p, dp, bubble, optimizer, memory
  std::string reason;     // one line for the report
};

// What the workload does that the model's shape does not say.
struct PredictOptions {
  // The most-loaded expert's tokens over the mean (metrics.jsonl
  // "expert_imbalance"); 1 = balanced routing, what balancing aims at.
  double expert_imbalance = 1;
};

// `memory`, when given, is peak_memory(cfg, c) already computed.
StepCost predict(const model::ModelConfig& cfg, const Candidate& c, const Cluster& cluster,
                 const MemoryBytes* memory = nullptr, const PredictOptions& opt = {});

// Bytes per element a wire format puts on the wire (none: fp32).
double wire_bytes(const std::string& format, std::int64_t quant_block);

}  // namespace exa::plan
