#include "train/flops.hpp"

#include "model/parameter_specs.hpp"

namespace exa::train {

FlopCount count_flops(const model::ModelConfig& c) {
  const double d = double(c.d_model), hd = double(c.head_dim()), H = double(c.n_heads),
               Hkv = double(c.n_kv_heads), F = double(c.d_expert), T = double(c.seq_len);
  double active = double(c.vocab_size) * d;  // LM head (tied or not, it is a matmul)
  double attn = 0;
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    active += d * H * hd + 2 * d * Hkv * hd + H * hd * d;
    if (c.is_moe_layer(i)) {
      active += double(c.n_experts) * d + (double(c.top_k) + double(c.n_shared_experts)) * 3 * F * d;
    } else {
      active += 3 * double(c.d_ff) * d;
    }
    attn += 6 * H * hd * T;
  }
  if (c.lora.enabled()) {
    // The frozen matrices skip their weight gradients (forward and input
    // gradient: 4 per parameter); the adapters take all three products.
    double adapters = 0;
    for (const auto& s : model::parameter_specs(c))
      if (s.trainable)  // a routed expert's adapters: the token passes k of the E
        adapters += double(s.numel()) *
                    (s.reduce == model::ReduceGroup::ExpertData ? double(c.top_k) / double(c.n_experts) : 1.0);
    return FlopCount{active, 4 * active + 6 * adapters + attn};
  }
  return FlopCount{active, 6 * active + attn};
}

}  // namespace exa::train
