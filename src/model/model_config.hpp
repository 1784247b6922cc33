#pragma once
// The model's hyper-parameters, read once from a validated deck. Everything
// about the architecture that docs/architecture.md ("The model") fixes is derived here (head dim,
// which layers are MoE, expert capacity) so no other code re-derives it.
#include <cstdint>

namespace exa::deck {
class Config;
}

namespace exa::model {

// Which projections carry adapters (lora.targets).
struct LoraTargets {
  bool attention = false;       // wq, wk, wv, wo
  bool dense_ffn = false;       // the dense layers' mlp.w1, w3, w2
  bool shared_experts = false;  // each shared expert's w1, w3, w2
  bool experts = false;         // each routed expert's w1, w3, w2 (its own A and B)
  bool router = false;          // each MoE layer's router
  bool embeddings = false;      // the token embedding (and through it a tied LM head)
};

// [attention]: which causal attention the layers use (docs/architecture.md,
// "LSH attention"). The parameters are the same either way.
struct AttentionConfig {
  bool lsh = false;
  int lsh_hashes = 2, lsh_bucket = 64, lsh_chunks = 1;
  bool lsh_local = false;  // one more round in position order (local attention)
};

struct LoraConfig {
  std::int64_t rank = 0;
  double alpha = 16.0;
  double dropout = 0.0;  // on the adapters' input, in training
  LoraTargets targets;
  bool enabled() const { return rank > 0; }
  // alpha / rank: the adapter's output is scaled by it (PEFT's convention).
  double scale() const { return rank > 0 ? alpha / double(rank) : 0.0; }
};

struct ModelConfig {
  // [model]
  std::int64_t vocab_size = 256, d_model = 128, n_layers = 4, n_heads = 4, n_kv_heads = 4, d_ff = 512,
               seq_len = 128;
  double norm_eps = 1e-5, rope_theta = 10000.0, init_std = 0.02;
  bool tie_embeddings = false;
  AttentionConfig attention;
  // [moe]
  std::int64_t n_experts = 8, top_k = 2, d_expert = 256, moe_every = 1, n_shared_experts = 0;
  double capacity_factor = 0.0, aux_coef = 0.01, z_coef = 0.001;
  bool norm_topk = true;
  // [lora]: low-rank adapters on the frozen model (docs/architecture.md,
  // "LoRA"). rank 0 = none.
  LoraConfig lora;
  // Every tensor frozen: a model that only runs forward (expert growth's
  // distillation teacher), with no gradients and no optimizer state.
  bool frozen = false;

  static ModelConfig from_deck(const deck::Config& cfg);

  std::int64_t head_dim() const { return d_model / n_heads; }
  // Keys in a query's score row before the causal mask: the sequence, or
  // LSH attention's windows over all rounds (duplicates counted), whichever
  // is smaller. The planner's attention-core FLOPs scale with it.
  double attention_span() const;
  // "Every moe_every-th layer": layer i (0-based) is MoE iff moe_every > 0
  // and (i + 1) % moe_every == 0. 1 = all layers, 2 = layers 1, 3, ...,
  // 0 = none. The PyTorch reference (tests/reference) uses the same rule.
  bool is_moe_layer(std::int64_t layer) const { return moe_every > 0 && (layer + 1) % moe_every == 0; }
  // Slots per expert for `tokens` tokens: ceil(c * tokens * k / E); 0 = dropless.
  std::int64_t expert_capacity(std::int64_t tokens) const;
  // The same for an explicit factor, top-k and expert count.
  static std::int64_t capacity_for(double factor, std::int64_t tokens, std::int64_t k, std::int64_t experts);
};

}  // namespace exa::model
