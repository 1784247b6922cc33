#pragma once
// Helpers shared by the optimizer tests: a small model's store, host copies,
// gradients from a formula of (tensor, global element), and an independent
// double-precision host reference of torch.optim.AdamW + clip_grad_norm_.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "model/parameter_store.hpp"

namespace exa::optim::test {

inline model::ModelConfig tiny_model() {
  model::ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 24;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 8;
  c.moe_every = 2;  // layer 0 MoE, layer 1 dense
  c.n_shared_experts = 1;
  return c;
}

inline std::vector<float> host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

inline void upload(const View1<float>& v, const std::vector<float>& x) {
  auto h = Kokkos::create_mirror_view(Kokkos::HostSpace(), v);
  for (std::size_t k = 0; k < x.size(); ++k) h(k) = x[k];
  Kokkos::deep_copy(v, h);
}

// Local buffer of `store` from f(tensor index, global element index).
inline std::vector<float> by_global(const model::ParameterStore& store,
                                    const std::function<float(std::size_t, std::int64_t)>& f) {
  std::vector<float> x(static_cast<std::size_t>(store.local_numel()));
  for (std::size_t i = 0; i < store.size(); ++i) {
    for (std::int64_t k = 0; k < store.shard(i).count; ++k) {
      x[static_cast<std::size_t>(store.local_offset(i) + k)] = f(i, store.shard(i).offset + k);
    }
  }
  return x;
}

// A gradient pattern with elements of both signs and varied magnitudes.
inline float pattern(std::size_t tensor, std::int64_t k, int step, double amplitude) {
  const double x = 0.37 * static_cast<double>(k) + 1.3 * step + 0.71 * static_cast<double>(tensor);
  return static_cast<float>(amplitude * (std::sin(x) + 0.3 * std::cos(2.9 * x)));
}

// torch.optim.AdamW (two param groups: decay / no decay) after
// torch.nn.utils.clip_grad_norm_, written out in double.
struct HostAdamW {
  double beta1, beta2, eps, wd;
  std::vector<double> p, m, v;
  std::vector<bool> decay;
  std::int64_t step = 0;

  // g: the true gradient. Returns the pre-clip norm.
  double update(std::vector<double> g, double lr, double max_norm) {
    double sq = 0;
    for (double x : g) sq += x * x;
    const double norm = std::sqrt(sq);
    const double coef = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    for (auto& x : g) x *= coef;
    ++step;
    const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (decay[k]) p[k] *= 1 - lr * wd;
      m[k] = beta1 * m[k] + (1 - beta1) * g[k];
      v[k] = beta2 * v[k] + (1 - beta2) * g[k] * g[k];
      const double denom = std::sqrt(v[k]) / std::sqrt(bc2) + eps;
      p[k] -= lr / bc1 * m[k] / denom;
    }
    return norm;
  }
};

inline HostAdamW host_reference(const model::ParameterStore& store, double b1, double b2, double eps, double wd) {
  HostAdamW r{b1, b2, eps, wd, {}, {}, {}, {}};
  const auto p = host(store.values());
  r.p.assign(p.begin(), p.end());
  r.m.assign(p.size(), 0.0);
  r.v.assign(p.size(), 0.0);
  r.decay.assign(p.size(), false);
  for (std::size_t i = 0; i < store.size(); ++i) {
    for (std::int64_t k = 0; k < store.shard(i).count; ++k) {
      r.decay[static_cast<std::size_t>(store.local_offset(i) + k)] = store.spec(i).weight_decay;
    }
  }
  return r;
}

}  // namespace exa::optim::test
