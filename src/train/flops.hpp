#pragma once
// FLOP accounting for throughput and MFU. Counts matmul FLOPs only, as the
// MFU literature does (PaLM appendix B): 6 * active parameters per token for
// forward + backward, plus attention's score and value products. Element-wise
// work (norms, softmax, SwiGLU gating) is left out on purpose.
#include <cstdint>

#include "model/model_config.hpp"

namespace exa::train {

struct FlopCount {
  double active_params = 0;    // matmul parameters one token touches
  double per_token_train = 0;  // forward + backward FLOPs per token
};

// Active parameters: the LM head and every block's q,k,v,o projections,
// dense FFNs, and for MoE layers the router, k routed experts and the shared
// experts. The embedding lookup is a gather (no FLOPs). Attention adds
// 2 matmuls of T*hd per head per token in the forward pass, halved by the
// causal mask: 3 * 2 * 2 * H * hd * T / 2 = 6 * H * hd * T per layer.
// Under LoRA the frozen matrices count 4 per parameter (no weight
// gradient) and the adapters 6 per parameter.
FlopCount count_flops(const model::ModelConfig& cfg);

}  // namespace exa::train
