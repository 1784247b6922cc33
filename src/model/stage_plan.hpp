#pragma once
// StagePlan: what one rank's part of the model is, fixed when the model is
// built (docs/architecture.md, "Partitioned layers"): the layer range of its
// pipeline stage and the local extents that tensor and expert parallelism
// set. The layer objects copy what they need from it; nothing in a forward
// or backward pass reads head counts, vocabulary or expert ranges from the
// global ModelConfig.
#include <cstdint>
#include <utility>
#include <vector>

#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/shard.hpp"

namespace exa::model {

struct StagePlan {
  std::int64_t layer_begin = 0, layer_end = 0;   // layers [layer_begin, layer_end) of n_layers
  std::int64_t n_layers = 0;
  std::int64_t heads = 0, kv_heads = 0;          // query / key-value heads on this rank
  std::int64_t d_ff = 0;                         // dense FFN columns on this rank
  std::int64_t d_expert = 0;                     // expert FFN columns on this rank
  std::int64_t expert_begin = 0, expert_end = 0; // experts held here
  std::int64_t vocab_begin = 0, vocab_end = 0;   // vocabulary rows of the embedding and head held here
  std::int64_t d_shared = 0;                     // shared-expert FFN columns on this rank
  // Tensor parallelism: this rank's part of the tp-way split of heads, dense
  // and shared FFN columns and vocabulary, and of the etp-way split of every
  // routed expert's F (etp = 1 keeps experts whole; etp < tp repeats the
  // split in each block of etp ranks).
  std::int64_t tp_rank = 0, tp = 1, etp_rank = 0, etp = 1;
  // Sequence parallelism (tp > 1): the residual stream, norms and their
  // outputs hold this rank's 1/tp of a micro-batch's rows.
  bool sequence_parallel = false;
  // Interleaved pipeline (pipeline.virtual_stages = v > 1): the rank's v
  // layer blocks ("chunks"), in order, [layer_begin, layer_end) spanning
  // them. Empty: the one chunk [layer_begin, layer_end).
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;

  // The whole model on one rank: the stage [0, L) with every head, column,
  // expert and vocabulary row.
  static StagePlan whole(const ModelConfig& cfg);
  // The whole-width stage [l0, l1) (pipeline stages without other splits).
  static StagePlan layers(const ModelConfig& cfg, std::int64_t l0, std::int64_t l1);
  // The interleaved stage `rank` of `pp` with v chunks: chunk c holds layer
  // block c*pp + rank of n_layers / (pp*v) layers. exa::Error unless pp*v
  // divides the layers.
  static StagePlan interleaved(const ModelConfig& cfg, std::int64_t rank, std::int64_t pp, std::int64_t v);
  // Expert parallelism: this plan holding only experts [begin, end).
  // exa::Error when the range is empty or outside [0, n_experts).
  StagePlan with_experts(std::int64_t begin, std::int64_t end) const;
  // Tensor parallelism: this plan holding part `rank` of `tp` of every
  // tensor-parallel dimension (ParamSpec::tp_dim), routed experts' F split
  // etp ways (etp divides tp: rank's part rank % etp, the same in each of
  // the tp/etp blocks of etp consecutive ranks). exa::Error naming the
  // extent that tp does not divide.
  StagePlan with_tensor_split(const ModelConfig& cfg, std::int64_t rank, std::int64_t tp,
                              std::int64_t etp) const;

  bool has_embedding() const { return layer_begin == 0; }
  bool has_head() const { return layer_end == n_layers; }
  std::int64_t local_layers() const;
  // The chunks' layer ranges (one: [layer_begin, layer_end)).
  std::vector<std::pair<std::int64_t, std::int64_t>> layer_ranges() const;
  bool holds_layer(std::int64_t l) const;
  std::int64_t local_experts() const { return expert_end - expert_begin; }
  // Rows of the residual stream for a micro-batch of n tokens.
  std::int64_t stream_rows(std::int64_t n) const { return sequence_parallel ? n / tp : n; }
  bool all_experts(const ModelConfig& cfg) const { return expert_begin == 0 && expert_end == cfg.n_experts; }
};

// Whether the plan's stage reads tensor `spec` at all: its layers' tensors,
// the embedding on the first stage, the final norm and LM head on the last
// (and, tied, the embedding there too: the head's copy). The whole model
// holds every tensor.
bool holds(const ParamSpec& spec, const StagePlan& plan, const ModelConfig& cfg);

// The box of tensor `spec` this plan holds: its expert range on the expert
// dimension (ParamSpec::ep_dim), its tensor-parallel part on ParamSpec::tp_dim
// (etp parts for the routed experts), the whole extent elsewhere; an empty
// box (extent 0) for a tensor of another pipeline stage (!holds). What the
// ParameterStore shards and the model's weights bind.
Box local_box(const ParamSpec& spec, const StagePlan& plan);
Box local_box(const ParamSpec& spec, const StagePlan& plan, const ModelConfig& cfg);

}  // namespace exa::model
