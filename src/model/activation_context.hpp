#pragma once
// Activation contexts: what one micro-batch's forward pass keeps for its
// backward pass (docs/architecture.md, "Activation contexts and schedules").
//
// A StageModel's forward fills a StageContext and hands it to the caller;
// backward consumes it. Several contexts may be alive at once (1F1B keeps up
// to pp - stage of them), each with buffers of its own. Contexts come from
// the model's pool and go back to it after backward, so a steady schedule
// allocates nothing per step: a context is reallocated only when the
// micro-batch shape changes.
//
// Everything a LayerContext holds is recomputable from `x` (the block input)
// and the weights, which is what activation recomputation exploits.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "kernels/permute.hpp"
#include "kernels/router.hpp"
#include "model/forward_result.hpp"

namespace exa::model {

// Shape of a micro-batch: B sequences of T tokens, N = B*T rows.
struct MicroBatchShape {
  std::int64_t B = 0, T = 0;
  std::int64_t N() const { return B * T; }
  bool operator==(const MicroBatchShape& o) const { return B == o.B && T == o.T; }
  bool operator!=(const MicroBatchShape& o) const { return !(*this == o); }
};

// How one MoE layer's rows moved between the expert-parallel ranks (P
// ranks, El experts each). Rows leave in the permuted order (by expert, so
// by destination rank); the rows from source s arrive as one run, by local
// expert within it ("source-major"). The experts need them by local expert
// ("expert-major"): expert_row and source_row are the two gathers.
template <class D = Device>
struct ExpertExchange {
  std::vector<std::int64_t> send_counts;   // [P*El] rows this rank sends to each global expert of the group
  std::vector<std::int64_t> recv_counts;   // [P*El] rows received from source s for local expert e: [s*El + e]
  std::vector<int> send_rows, recv_rows;   // [P] rows to / from each rank
  std::vector<index_t> expert_offsets;     // [El+1] first expert-major row of each local expert
  Kokkos::View<int*, Layout, D> expert_row;  // [R] expert-major row i came from source-major row expert_row[i]
  Kokkos::View<int*, Layout, D> source_row;  // [R] source-major row j is expert-major row source_row[j]
  index_t received = 0;                    // R
  // Set by the MoE block before dispatching: its layer index, which the
  // dispatcher needs to find the layer's expert placement.
  std::int64_t layer = -1;
  // [E] the physical slot of each expert when the placement is not the
  // identity (re-placement), empty otherwise: plan.counts is then by slot.
  std::vector<int> slot_of;
  // moe.a2a_chunks > 1: the exchange in parts that travel while the
  // previous part is computed. Part k's received rows are rows [first,
  // first + received) of R, source-major within the part, and its maps and
  // offsets are relative to `first`.
  struct Part {
    std::vector<int> send_rows, recv_rows;  // [P] rows to / from each rank in this part
    std::vector<int> send_at, recv_at;      // [P] first permuted row sent to / row of R received from each rank
    std::vector<index_t> expert_offsets;    // [El+1]
    Kokkos::View<int*, Layout, D> expert_row, source_row;  // [received]
    index_t first = 0, received = 0;
  };
  std::vector<Part> parts;
};

// Packed sequences' documents (docs/architecture.md, "Sequence packing"):
// for sequence b and position p of the whole sequence (every position, also
// under context parallelism, where a rank holds only some rows), the first
// position of p's document, start(b, p), and one past its last, end(b, p).
// Empty views: no documents (the causal mask alone, positions from 0).
template <class D = Device>
struct DocumentSpans {
  Kokkos::View<const std::int32_t**, Layout, D> start, end;
  bool on() const { return start.data() != nullptr; }
};

template <class T, class D = Device>
struct LayerContext {
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using V3 = Kokkos::View<T***, Layout, D>;
  using I1 = Kokkos::View<int*, Layout, D>;
  using I2 = Kokkos::View<int**, Layout, D>;

  // LoRA's dropout key of this layer in this micro-batch (0: none). Set
  // before each forward and backward from the stage context's, so a
  // recomputed forward and the backward draw the forward's masks.
  std::uint64_t lora_key = 0;
  // The micro-batch's documents (the stage context's copy; null: none), set
  // with lora_key: attention masks and RoPE positions follow them.
  const std::int32_t* doc_start = nullptr;
  const std::int32_t* doc_end = nullptr;
  index_t doc_stride = 0;
  // memory.recompute = "selective": attn_xn, ffn_xn, h, eh (eh16) and sh are
  // buffers the model shares between all contexts, not this one's. Forward
  // writes them and reads them at once; backward computes them again (a
  // norm, a SwiGLU: element-wise work) right before it reads them.
  bool shared_cheap = false;
  // Attention sub-block (local heads).
  V2 x;          // block input (residual stream) [N,d]
  V1 attn_rstd;  // [N]
  V2 attn_xn;    // RMSNorm(x) [N,d]
  V2 q, k, v;    // projections, RoPE applied to q and k: [N,Hl*hd], [N,Hkvl*hd], [N,Hkvl*hd]
  V2 attn_o;     // attention output before wo [N,Hl*hd]
  V3 attn_lse;   // [B,Hl,T]
  // FFN sub-block.
  V2 x_mid;      // x + Attn(...) [N,d]
  V1 ffn_rstd;   // [N]
  V2 ffn_xn;     // RMSNorm(x_mid) [N,d]
  // Dense SwiGLU: a = xn w1^T, b = xn w3^T, h = silu(a) * b   [N,d_ff local]
  V2 a, b, h;
  // MoE.
  V2 router_logits, probs;  // [N,E]
  V1 router_lse;            // [N]
  I2 topk;                  // [N,k]
  V2 gates;                 // [N,k]
  I1 counts;                // [E] routed (before dropping)
  I2 capacity_keep;         // [N,k] moe.capacity_scope = "sequence": 1 = kept (RoutingScope); else empty
  // moe.aux_scope = "sequence" (RoutingScope): the counts summed over the
  // ranks sharing the sequences, and the factor on d(aux) that makes this
  // rank's share of the aux gradient the single-rank one.
  I1 scope_counts;          // [E]
  double aux_grad_scale = 1;
  kernels::PermutePlan<D> plan;
  V2 xp, ea, eb, eh, yp;    // permuted rows (first plan.rows of N*k): [.,d], [.,F] x3, [.,d]
  // Under bf16 products a dispatcher that stores_bf16() keeps xp, ea, eb
  // and eh in bf16 here instead, and the fp32 views above stay empty
  // (docs/architecture.md, "Mixed precision"): the products round xp and
  // eh to bf16 anyway, and ea, eb are rounded once after their products.
  using H2 = Kokkos::View<bf16**, Layout, D>;
  H2 xp16, ea16, eb16, eh16;
  // Expert parallelism: the rows other ranks sent to this rank's experts and
  // how they were exchanged (filled by the all-to-all dispatcher; ea/eb/eh
  // then hold the experts' activations of these rows, not of xp).
  V2 xr;                    // received rows, grouped by local expert [R,d]
  H2 xr16;                  // ... in bf16, where the dispatcher stores_bf16
  ExpertExchange<D> exchange;
  // Which of this rank's experts had rows in this forward (host; the
  // dispatchers fill it), for memory.offload_experts.
  std::vector<std::uint8_t> experts_used;
  // Told experts_used each time it is marked, before the experts' products
  // run (the stage model passes it to the unit hooks' experts_routed);
  // empty: nobody listens.
  std::function<void(const std::vector<std::uint8_t>&)> on_routed;
  // Marks the experts with rows in `off` (a grouped gemm's offsets).
  void mark_experts_used(const std::vector<index_t>& off) {
    for (std::size_t e = 0; e + 1 < off.size() && e < experts_used.size(); ++e)
      if (off[e + 1] > off[e]) experts_used[e] = 1;
    if (on_routed) on_routed(experts_used);
  }
  V3 sa, sb, sh;            // shared experts [S,N,F]
  kernels::RouterLosses router_losses;

  // Bytes held for the backward pass (the memory activation recomputation
  // would give back); the shared buffers of shared_cheap are the model's.
  std::size_t bytes() const {
    std::size_t n = 0;
    auto add = [&n](const auto& v) { n += v.span() * sizeof(typename std::decay_t<decltype(v)>::value_type); };
    for (const auto* v2 : {&x, &q, &k, &v, &attn_o, &x_mid, &a, &b, &router_logits, &probs, &gates, &xp, &ea, &eb,
                           &yp, &xr})
      add(*v2);
    if (!shared_cheap)
      for (const auto* v2 : {&attn_xn, &ffn_xn, &h, &eh}) add(*v2);
    for (const auto* v1 : {&attn_rstd, &ffn_rstd, &router_lse}) add(*v1);
    for (const auto* v16 : {&xp16, &ea16, &eb16, &xr16}) add(*v16);
    if (!shared_cheap) add(eh16);
    for (const auto* v3 : {&attn_lse, &sa, &sb}) add(*v3);
    if (!shared_cheap) add(sh);
    add(topk);
    add(counts);
    add(plan.row_of);
    add(plan.token_of);
    add(exchange.expert_row);
    add(exchange.source_row);
    return n;
  }
};

// One micro-batch's activations on one pipeline stage.
// A teacher's soft targets for distillation (docs/architecture.md,
// "Distillation"), on the stage that holds the head: softmax(logits / tau)
// over this rank's vocabulary columns [N, V local], and each row's part of
// sum_j q_j log q_j over those columns [N], in double: the KL is a
// difference of terms of size log V, and a teacher equal to the student
// must give 0 to well below the float rounding of one of them.
template <class T, class D = Device>
struct SoftTargets {
  Kokkos::View<T**, Layout, D> probs;
  Kokkos::View<double*, Layout, D> neg_entropy;
};

template <class T, class D = Device>
struct StageContext {
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using Ids = Kokkos::View<std::int32_t*, Layout, D>;

  MicroBatchShape shape;
  std::uint64_t lora_key = 0;  // LoRA's dropout key of this micro-batch (0: evaluation, or no dropout)
  int chunk = 0;                           // the model chunk it ran (interleaved pipeline; else 0)
  std::vector<LayerContext<T, D>> layers;  // the chunk's layers, in order
  V2 out;                                  // the last layer's output [N,d] (the final norm's input on the last stage)
  // First stage: the micro-batch's input tokens (copied: the embedding's
  // backward needs them after the caller has reused its batch buffers).
  Ids tokens;
  // The micro-batch's documents [B, whole T] (copied, as the tokens are);
  // empty views when it has none.
  Kokkos::View<std::int32_t**, Layout, D> doc_start, doc_end;
  // Last stage: targets, the final norm and the head.
  Ids targets;
  V2 hf, logits;  // final RMSNorm output [N,d], logits [N,V local]
  V1 rstd_f, ce_lse;
  std::int64_t n_valid = 0;
  // The head's loss and gradient are the valid targets' sum over a
  // denominator the caller chose (StageModel::Input::ce_denominator):
  // ce_weight = n_valid / that denominator scales this rank's mean.
  double ce_weight = 1;
  // Distillation (the student's head; docs/architecture.md
  // "Distillation"): the teacher's soft targets, the student's tempered
  // log-sum-exp per row, and the term's weight; none when the soft targets
  // are empty.
  struct Distill {
    SoftTargets<T, D> teacher;
    Kokkos::View<double*, Layout, D> lse;  // double, as the teacher's neg_entropy
    double tau = 1, coef = 0;
    bool on() const { return teacher.probs.data() != nullptr; }
  } distill;
  ForwardResult result;  // what the forward reported (loss on the last stage, routing of its MoE layers)
  bool live = false;  // filled by a forward and not yet consumed by a backward

  std::size_t bytes() const {
    std::size_t n = (out.span() + hf.span() + logits.span() + rstd_f.span() + ce_lse.span()) * sizeof(T);
    for (const auto& c : layers) n += c.bytes();
    return n;
  }
};

}  // namespace exa::model
