#include "model/model_config.hpp"

#include <algorithm>
#include <cmath>

#include "core/deck/config.hpp"
#include "core/deck/deck_checks.hpp"

namespace exa::model {

ModelConfig ModelConfig::from_deck(const deck::Config& c) {
  ModelConfig m;
  m.vocab_size = c.get_int("model.vocab_size");
  m.d_model = c.get_int("model.d_model");
  m.n_layers = c.get_int("model.n_layers");
  m.n_heads = c.get_int("model.n_heads");
  m.n_kv_heads = c.get_int("model.n_kv_heads");  // the deck resolves 0 to n_heads
  m.d_ff = c.get_int("model.d_ff");
  m.seq_len = c.get_int("model.seq_len");
  m.norm_eps = c.get_float("model.norm_eps");
  m.rope_theta = c.get_float("model.rope_theta");
  m.init_std = c.get_float("model.init_std");
  m.tie_embeddings = c.get_bool("model.tie_embeddings");
  m.attention.lsh = c.get_string("attention.kind") == "lsh";
  m.attention.lsh_hashes = static_cast<int>(c.get_int("attention.lsh_hashes"));
  m.attention.lsh_bucket = static_cast<int>(c.get_int("attention.lsh_bucket"));
  m.attention.lsh_chunks = static_cast<int>(c.get_int("attention.lsh_chunks"));
  m.attention.lsh_local = c.get_bool("attention.lsh_local");
  m.n_experts = c.get_int("moe.n_experts");
  m.top_k = c.get_int("moe.top_k");
  m.d_expert = c.get_int("moe.d_expert");
  m.moe_every = c.get_int("moe.moe_every");
  m.n_shared_experts = c.get_int("moe.n_shared_experts");
  m.capacity_factor = c.get_float("moe.capacity_factor");
  m.norm_topk = c.get_bool("moe.norm_topk");
  m.aux_coef = c.get_float("moe.aux_coef");
  m.z_coef = c.get_float("moe.z_coef");
  m.lora.rank = c.get_int("lora.rank");
  if (m.lora.enabled()) {
    m.lora.alpha = c.get_float("lora.alpha");
    m.lora.dropout = c.get_float("lora.dropout");
    for (const auto& t : deck::name_list(c.get_string("lora.targets"))) {
      // deck_checks.cpp refused every other name.
      if (t == "attention") m.lora.targets.attention = true;
      if (t == "dense_ffn") m.lora.targets.dense_ffn = true;
      if (t == "shared_experts") m.lora.targets.shared_experts = true;
      if (t == "experts") m.lora.targets.experts = true;
      if (t == "router") m.lora.targets.router = true;
      if (t == "embeddings") m.lora.targets.embeddings = true;
    }
  }
  return m;
}

double ModelConfig::attention_span() const {
  const double T = static_cast<double>(seq_len);
  if (!attention.lsh) return T;
  const double rounds = attention.lsh_hashes + (attention.lsh_local ? 1 : 0);
  return std::min(T, rounds * (attention.lsh_chunks + 1) * attention.lsh_bucket);
}

std::int64_t ModelConfig::capacity_for(double factor, std::int64_t tokens, std::int64_t k, std::int64_t experts) {
  if (factor <= 0) return 0;
  return static_cast<std::int64_t>(std::ceil(factor * static_cast<double>(tokens * k) / static_cast<double>(experts)));
}

std::int64_t ModelConfig::expert_capacity(std::int64_t tokens) const {
  return capacity_for(capacity_factor, tokens, top_k, n_experts);
}

}  // namespace exa::model
