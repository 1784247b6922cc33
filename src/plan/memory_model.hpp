#pragma once
// Memory per device by the memory ledger's categories (core/memory_ledger.hpp)
// for a candidate layout. Parameters, gradients and optimizer state are
// exact: they come from the same stage plan (parallel::stage_plan_of) and
// ZeRO shard layout (parallel::data::ShardLayout) the run builds, and
// follow the buffers the ZeRO engine and AdamW allocate. Activations are
// estimated from what an activation context keeps per layer, times the
// contexts the stage's schedule keeps alive (parallel::check_schedule).
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "model/stage_plan.hpp"
#include "plan/candidate.hpp"

namespace exa::plan {

struct MemoryBytes {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, communication = 0;
  // memory.offload_experts: the offloaded experts' pages resident at once
  // (the categories above then count only what stays in memory).
  double offload = 0;
  double total() const { return parameters + gradients + optimizer + activations + communication + offload; }
};

// The parameters, gradients and optimizer bytes of a rank holding `plan`
// whose data group has `data_size` ranks and expert-data group
// `expert_data_size`, part 0 of each (the largest part); `deferred`: the
// zb schedule's weight gradients are deferred (ZeRO 2/3 then keep two more
// unit gradient buffers in each trainable Data-group engine).
MemoryBytes state_bytes(const model::ModelConfig& cfg, const model::StagePlan& plan, int zero, int data_size,
                        int expert_data_size, bool deferred = false);

// The elements of a rank holding `plan` by the group that reduces their
// gradients and gathers them under ZeRO: the Data group's engines (what
// parallel.hierarchical runs in stages) and the routed experts' (the
// ExpertData group, always flat). `trainable` leaves LoRA's frozen model out.
struct GroupElements {
  double data = 0, experts = 0;
  double total() const { return data + experts; }
};
struct StageElements {
  GroupElements parameters, trainable;
};
StageElements stage_elements(const model::ModelConfig& cfg, const model::StagePlan& plan);

// The plan of pipeline stage `stage` of the candidate (tensor part 0,
// experts of EP rank 0).
model::StagePlan stage_plan(const model::ModelConfig& cfg, const Candidate& c, int stage);

// Micro-batches a simulation of n_micro needs to see the steady state of
// a pipeline of pp stages with `chunks` chunks each (n_micro when small).
int steady_micro(int n_micro, int pp, int chunks);

// Layers per recomputation segment, of `layers` in a chunk: 1 unless
// memory.recompute = "full" keeps only every N-th input
// (memory.checkpoint_layers N, or "sqrt": ceil(sqrt(layers))).
double recompute_segment(const Candidate& c, double layers);

// memory.offload_experts: the routed experts' value bytes (the same again
// for their gradients, twice for the moments) that `plan`'s rank keeps in
// the offload file (ZeRO 1-3: its part over the expert-data group of
// `expert_data` ranks), and one MoE layer's whole boxes of them.
struct OffloadedBytes {
  double values = 0, layer = 0;
  std::int64_t moe_layers = 0;
};
OffloadedBytes offloaded_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                               int expert_data);

// zb's deferred weight-gradient copies on `stage`, at most pp - stage + 1
// micro-batches of them (0 under any other schedule).
double deferred_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan, int stage);

// Activation bytes one micro-batch's context keeps on `plan` (one chunk of
// an interleaved stage), and those the recomputation's work buffers add.
double context_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                     std::int64_t layers);

// memory.recompute = "selective": the bytes of what is computed again in
// backward (both norms' outputs, the SwiGLU products) that a context of
// `layers` layers would otherwise keep, and the one set of buffers the
// model shares between contexts instead.
struct CheapBytes {
  double per_context = 0, shared = 0;
};
CheapBytes cheap_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan,
                       std::int64_t layers);

// The backward's scratch the model keeps once per stage, whatever the
// contexts in flight (model/layers/scratch.hpp, the token dispatcher's
// permuted-row gradients): activations, and under expert parallelism the
// all-to-all dispatcher's rows, which the ledger counts as communication.
struct ScratchBytes {
  double activations = 0, communication = 0;
};
ScratchBytes scratch_bytes(const model::ModelConfig& cfg, const Candidate& c, const model::StagePlan& plan);

// Every category for pipeline stage `stage`; and the largest over stages.
MemoryBytes stage_memory(const model::ModelConfig& cfg, const Candidate& c, int stage);
MemoryBytes peak_memory(const model::ModelConfig& cfg, const Candidate& c, int* worst_stage = nullptr);

}  // namespace exa::plan
