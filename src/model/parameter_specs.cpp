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
  const bool lora = c.lora.enabled();
  const bool base_trains = !lora && !c.frozen;
  const std::int64_t rank = c.lora.rank;
  // The adapters of the matrix just pushed: A [.., r, in] starts random
  // (std 1/sqrt(in)), B [.., out, r] at zero, so the adapted model starts
  // as the frozen one. The factor on W's split side takes the split.
  auto adapters = [&]() {
    const ParamSpec w = p.back();
    const std::size_t k = w.shape.size();  // 2, or 3 with a leading expert index
    auto a = w.shape, b = w.shape;
    a[k - 2] = rank;
    b[k - 1] = rank;
    const int out_dim = int(k) - 2, in_dim = int(k) - 1;
    const double a_std = 1.0 / std::sqrt(double(w.shape[k - 1]));
    // A routed expert's adapters live with it: split over ep as its W is.
    p.push_back(ParamSpec{lora_a_name(w.name), a, I::Normal, a_std, true, w.tp_dim == in_dim ? in_dim : -1,
                          w.ep_dim, w.reduce});
    p.push_back(ParamSpec{lora_b_name(w.name), b, I::Zeros, 0.0, true, w.tp_dim == out_dim ? out_dim : -1,
                          w.ep_dim, w.reduce});
  };
  auto matrix = [&](std::string name, std::vector<std::int64_t> shape, double s, Rule r, bool adapted = false) {
    p.push_back(ParamSpec{std::move(name), std::move(shape), I::Normal, s, true, r.tp_dim, r.ep_dim, r.reduce,
                          base_trains});
    if (lora && adapted) adapters();
  };
  auto gain = [&](std::string name) {
    const Rule r = replicated;
    p.push_back(ParamSpec{std::move(name), {d}, I::Ones, 0.0, false, r.tp_dim, r.ep_dim, r.reduce, base_trains});
  };

  matrix("embed.weight", {c.vocab_size, d}, std, vocab, c.lora.targets.embeddings);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string L = fmt::format("layers.{}.", i);
    gain(L + "attn_norm.weight");
    const bool att = c.lora.targets.attention, sh = c.lora.targets.shared_experts, mlp = c.lora.targets.dense_ffn,
               ex = c.lora.targets.experts, ro = c.lora.targets.router;
    matrix(L + "attn.wq.weight", {c.n_heads * hd, d}, std, column, att);
    matrix(L + "attn.wk.weight", {c.n_kv_heads * hd, d}, std, column, att);
    matrix(L + "attn.wv.weight", {c.n_kv_heads * hd, d}, std, column, att);
    matrix(L + "attn.wo.weight", {d, c.n_heads * hd}, out_std, row, att);
    gain(L + "ffn_norm.weight");
    if (c.is_moe_layer(i)) {
      matrix(L + "moe.router.weight", {E, d}, std, replicated, ro);
      matrix(L + "moe.experts.w1", {E, F, d}, std, expert_in, ex);
      matrix(L + "moe.experts.w3", {E, F, d}, std, expert_in, ex);
      matrix(L + "moe.experts.w2", {E, d, F}, out_std, expert_out, ex);
      if (c.n_shared_experts > 0) {
        const std::int64_t S = c.n_shared_experts;
        matrix(L + "moe.shared.w1", {S, F, d}, std, shared_in, sh);
        matrix(L + "moe.shared.w3", {S, F, d}, std, shared_in, sh);
        matrix(L + "moe.shared.w2", {S, d, F}, out_std, shared_out, sh);
      }
    } else {
      matrix(L + "mlp.w1", {c.d_ff, d}, std, column, mlp);
      matrix(L + "mlp.w3", {c.d_ff, d}, std, column, mlp);
      matrix(L + "mlp.w2", {d, c.d_ff}, out_std, row, mlp);
    }
  }
  gain("norm.weight");
  if (!c.tie_embeddings) matrix("lm_head.weight", {c.vocab_size, d}, std, vocab);
  return p;
}

namespace {
std::string stem(const std::string& base) {
  const std::string w = ".weight";
  if (base.size() > w.size() && base.compare(base.size() - w.size(), w.size(), w) == 0)
    return base.substr(0, base.size() - w.size());
  return base;
}
}  // namespace

std::string lora_a_name(const std::string& base) { return stem(base) + ".lora_a"; }
std::string lora_b_name(const std::string& base) { return stem(base) + ".lora_b"; }

bool is_lora_adapter(const std::string& name) {
  const auto ends = [&](const char* t) {
    const std::string tail(t);
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends(".lora_a") || ends(".lora_b");
}

}  // namespace exa::model
