#include "model/parameter_specs.hpp"

#include <cmath>
#include <fmt/format.h>

namespace exa::model {

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  const std::int64_t d = c.d_model, hd = c.head_dim(), E = c.n_experts, F = c.d_expert;
  const double std = c.init_std;
  // Output projections feed the residual stream once per sub-block; scaling
  // them by 1/sqrt(2L) keeps the residual variance independent of depth.
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  using I = ParamSpec::Init;
  using R = ReduceGroup;
  // Partition rules by role (ParamSpec::tp_dim, ep_dim, reduce).
  struct Rule {
    int tp_dim, ep_dim;
    R reduce;
  };
  const Rule replicated{-1, -1, R::Data};      // norms, router
  const Rule column{0, -1, R::Data};           // [out, in] split on out: wq/wk/wv, mlp.w1/w3
  const Rule row{1, -1, R::Data};              // [out, in] split on in: wo, mlp.w2
  const Rule vocab{0, -1, R::Data};            // [V, d] split on V: embedding, LM head
  const Rule expert_in{1, 0, R::ExpertData};   // experts w1/w3 [E,F,d]: E over ep, F over etp
  const Rule expert_out{2, 0, R::ExpertData};  // experts w2 [E,d,F]
  const Rule shared_in{1, -1, R::Data};        // shared w1/w3 [S,F,d]: like the dense MLP
  const Rule shared_out{2, -1, R::Data};       // shared w2 [S,d,F]
  std::vector<ParamSpec> p;
  auto matrix = [&](std::string name, std::vector<std::int64_t> shape, double s, Rule r) {
    p.push_back(ParamSpec{std::move(name), std::move(shape), I::Normal, s, true, r.tp_dim, r.ep_dim, r.reduce});
  };
  auto gain = [&](std::string name) {
    const Rule r = replicated;
    p.push_back(ParamSpec{std::move(name), {d}, I::Ones, 0.0, false, r.tp_dim, r.ep_dim, r.reduce});
  };

  matrix("embed.weight", {c.vocab_size, d}, std, vocab);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string L = fmt::format("layers.{}.", i);
    gain(L + "attn_norm.weight");
    matrix(L + "attn.wq.weight", {c.n_heads * hd, d}, std, column);
    matrix(L + "attn.wk.weight", {c.n_kv_heads * hd, d}, std, column);
    matrix(L + "attn.wv.weight", {c.n_kv_heads * hd, d}, std, column);
    matrix(L + "attn.wo.weight", {d, c.n_heads * hd}, out_std, row);
    gain(L + "ffn_norm.weight");
    if (c.is_moe_layer(i)) {
      matrix(L + "moe.router.weight", {E, d}, std, replicated);
      matrix(L + "moe.experts.w1", {E, F, d}, std, expert_in);
      matrix(L + "moe.experts.w3", {E, F, d}, std, expert_in);
      matrix(L + "moe.experts.w2", {E, d, F}, out_std, expert_out);
      if (c.n_shared_experts > 0) {
        const std::int64_t S = c.n_shared_experts;
        matrix(L + "moe.shared.w1", {S, F, d}, std, shared_in);
        matrix(L + "moe.shared.w3", {S, F, d}, std, shared_in);
        matrix(L + "moe.shared.w2", {S, d, F}, out_std, shared_out);
      }
    } else {
      matrix(L + "mlp.w1", {c.d_ff, d}, std, column);
      matrix(L + "mlp.w3", {c.d_ff, d}, std, column);
      matrix(L + "mlp.w2", {d, c.d_ff}, out_std, row);
    }
  }
  gain("norm.weight");
  if (!c.tie_embeddings) matrix("lm_head.weight", {c.vocab_size, d}, std, vocab);
  return p;
}

}  // namespace exa::model
