#pragma once
// Small models, token batches and random weights shared by the model tests.
#include <cmath>
#include <cstdint>
#include <vector>

#include "harness/fd_check.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/weights.hpp"

namespace exa::test {

using TokView = Kokkos::View<std::int32_t**, exa::Layout, exa::Device>;
using exa::model::ModelConfig;

// Two layers (one dense, one MoE with a shared expert), GQA.
inline ModelConfig small() {
  ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.seq_len = 16;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 24;
  c.moe_every = 2;  // one dense, one MoE layer
  c.n_shared_experts = 1;
  return c;
}

inline TokView tokens(std::int64_t B, std::int64_t T, std::int64_t V, std::uint64_t seed) {
  TokView t("tokens", B, T);
  auto h = Kokkos::create_mirror_view(t);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < T; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      h(b, i) = std::int32_t((s >> 33) % std::uint64_t(V));
    }
  Kokkos::deep_copy(t, h);
  return t;
}

// targets[b, t] = inputs[b, t+1] (next-token), last one random.
inline TokView shifted(const TokView& in, std::int64_t V, std::uint64_t seed) {
  TokView t("targets", in.extent(0), in.extent(1));
  auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in);
  auto ht = Kokkos::create_mirror_view(t);
  for (std::size_t b = 0; b < in.extent(0); ++b)
    for (std::size_t i = 0; i < in.extent(1); ++i)
      ht(b, i) = i + 1 < in.extent(1) ? hi(b, i + 1) : std::int32_t((seed + b) % std::uint64_t(V));
  Kokkos::deep_copy(t, ht);
  return t;
}

template <class V>
std::vector<double> host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(h.span());
  for (std::size_t i = 0; i < h.span(); ++i) out[i] = double(h.data()[i]);
  return out;
}

// Random weights of O(1) activations in a flat buffer of T (spec order).
template <class T>
exa::View1<T> random_flat(const ModelConfig& c, std::uint64_t seed) {
  const auto specs = exa::model::parameter_specs(c);
  std::int64_t total = 0;
  const auto off = exa::model::flat_offsets(specs, &total);
  exa::View1<double> vd("vd", total);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto v = Kokkos::subview(vd, Kokkos::make_pair(off[i], off[i] + specs[i].numel()));
    if (specs[i].shape.size() == 1)
      exa::test::fill_uniform(v, seed + i, 0.8, 1.2);
    else {
      const double a = 1.5 / std::sqrt(double(specs[i].shape.back()));
      exa::test::fill_uniform(v, seed + i, -a, a);
    }
  }
  exa::View1<T> out("flat", total);
  auto ho = Kokkos::create_mirror_view(out);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), vd);
  for (std::int64_t i = 0; i < total; ++i) ho(i) = T(hd(i));
  Kokkos::deep_copy(out, ho);
  return out;
}

}  // namespace exa::test
