// Whole-model gradient checks: the analytic backward of Transformer<double>
// against central finite differences of the full loss (ce + aux + z), for
// every parameter tensor, on tiny configurations covering each model option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/fd_check.hpp"
#include "model/parameter_specs.hpp"
#include "model/transformer.hpp"

using namespace exa::model;
using exa::Device;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 17;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA
  c.d_ff = 12;
  c.seq_len = 6;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 8;
  c.moe_every = 1;
  c.n_shared_experts = 0;
  c.capacity_factor = 0.0;
  c.norm_topk = true;
  c.aux_coef = 0.1;  // large enough that a wrong aux/z gradient would show
  c.z_coef = 0.05;
  return c;
}

constexpr int kB = 2, kT = 6;

// A double model on a flat buffer, with O(1) activations (random weights of
// scale ~1/sqrt(fan_in), norm gains near 1) so that every gradient is sizeable.
struct DoubleModel {
  ModelConfig cfg;
  std::vector<ParamSpec> specs;
  std::vector<std::int64_t> off;
  exa::View1<double> values, grads;
  Weights<double> w, g;
  Transformer<double> model;
  Kokkos::View<std::int32_t**, exa::Layout, Device> inputs, targets;

  DoubleModel(const ModelConfig& c, std::uint64_t seed, bool ignore_one = false)
      : cfg(c), specs(parameter_specs(c)), model(c) {
    std::int64_t total = 0;
    off = flat_offsets(specs, &total);
    values = exa::View1<double>("values", total);
    grads = exa::View1<double>("grads", total);
    w = bind_flat(cfg, values);
    g = bind_flat(cfg, grads);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& s = specs[i];
      auto v = Kokkos::subview(values, Kokkos::make_pair(off[i], off[i] + s.numel()));
      if (s.shape.size() == 1) {
        exa::test::fill_uniform(v, seed * 131 + i, 0.8, 1.2);
      } else {
        double a = 1.5 / std::sqrt(double(s.shape.back()));
        if (s.name == "embed.weight") a = 1.0;
        if (s.name.find("router") != std::string::npos) a = 2.0 / std::sqrt(double(s.shape.back()));
        exa::test::fill_uniform(v, seed * 131 + i, -a, a);
      }
    }
    inputs = decltype(inputs)("inputs", kB, kT);
    targets = decltype(targets)("targets", kB, kT);
    auto hi = Kokkos::create_mirror_view(inputs);
    auto ht = Kokkos::create_mirror_view(targets);
    std::uint64_t s = seed * 2654435761u + 17;
    for (int b = 0; b < kB; ++b)
      for (int t = 0; t < kT; ++t) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        hi(b, t) = int((s >> 33) % cfg.vocab_size);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ht(b, t) = int((s >> 33) % cfg.vocab_size);
      }
    if (ignore_one) ht(1, 2) = -1;
    Kokkos::deep_copy(inputs, hi);
    Kokkos::deep_copy(targets, ht);
  }

  // Every forward of a check draws LoRA's dropout masks from the same key,
  // so the loss is a function of the weights alone.
  ForwardResult forward() {
    model.set_dropout_key(7);
    if (soft.probs.data() == nullptr) return model.forward(w, inputs, targets);
    typename Transformer<double>::Input in;
    in.tokens = inputs;
    in.targets = targets;
    in.soft_in = soft;
    in.temperature = tau;
    in.distill_coef = coef;
    return model.forward_input(w, in);
  }
  // Distillation: a teacher's soft targets [B*T, V], its temperature and
  // the term's weight (none when soft is empty).
  exa::model::SoftTargets<double> soft;
  double tau = 1, coef = 0;
  double loss() { return forward().loss.loss; }

  // Smallest gap between the k-th and (k+1)-th router probability over every
  // token of every MoE layer (how far the routing is from a top-k flip).
  double topk_gap() {
    forward();
    double gap = 1e300;
    const int E = int(cfg.n_experts), K = int(cfg.top_k);
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      if (!cfg.is_moe_layer(l) || K >= E) continue;
      auto p = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.cache(l).probs);
      for (std::size_t n = 0; n < p.extent(0); ++n) {
        std::vector<double> r(E);
        for (int e = 0; e < E; ++e) r[e] = p(n, e);
        std::sort(r.begin(), r.end(), std::greater<double>());
        gap = std::min(gap, r[K - 1] - r[K]);
      }
    }
    return gap;
  }
};

struct TensorErr {
  std::string name;
  double rel = 0, abs = 0, scale = 0;
};

// FD-checks every tensor (up to `per_tensor` strided elements each); returns
// the per-tensor errors. rel = max|analytic - numeric| / max(max|numeric|, 1e-3).
std::vector<TensorErr> check_all(DoubleModel& m, const std::string& label, double h = 1e-6,
                                 std::size_t per_tensor = 10) {
  Kokkos::deep_copy(m.grads, 0.0);
  const auto res = m.forward();
  m.model.backward(m.w, m.g, 1.0);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.grads);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.values);
  std::printf("[%s] loss %.9f = ce %.9f + aux %.9f + z %.9f; dropped", label.c_str(), res.loss.loss, res.loss.ce,
              res.loss.aux, res.loss.z);
  for (const auto& r : res.routing) std::printf(" L%lld:%lld", (long long)r.layer, (long long)r.dropped);
  std::printf("\n");
  std::vector<TensorErr> out;
  for (std::size_t i = 0; i < m.specs.size(); ++i) {
    const std::int64_t n = m.specs[i].numel();
    const std::int64_t stride = std::max<std::int64_t>(1, n / std::int64_t(per_tensor));
    TensorErr te;
    te.name = m.specs[i].name;
    double max_num = 0, max_diff = 0;
    for (std::int64_t j = (std::int64_t(i) * 7) % stride; j < n; j += stride) {
      const std::int64_t at = m.off[i] + j;
      const double orig = hv(at);
      hv(at) = orig + h;
      Kokkos::deep_copy(m.values, hv);
      const double lp = m.loss();
      hv(at) = orig - h;
      Kokkos::deep_copy(m.values, hv);
      const double lm = m.loss();
      hv(at) = orig;
      const double num = (lp - lm) / (2 * h);
      max_num = std::max(max_num, std::fabs(num));
      max_diff = std::max(max_diff, std::fabs(num - hg(at)));
    }
    Kokkos::deep_copy(m.values, hv);
    te.abs = max_diff;
    te.scale = max_num;
    te.rel = max_diff / std::max(max_num, 1e-3);
    out.push_back(te);
  }
  double worst = 0;
  std::string wname;
  for (const auto& e : out) {
    std::printf("  [%s] %-28s max|g| %.3e  abs err %.2e  rel err %.2e\n", label.c_str(), e.name.c_str(), e.scale,
                e.abs, e.rel);
    if (e.rel >= worst) {
      worst = e.rel;
      wname = e.name;
    }
  }
  std::printf("[%s] worst relative FD error %.3e (%s)\n", label.c_str(), worst, wname.c_str());
  return out;
}

// Picks the first seed whose routing is at least `min_gap` from a top-k flip.
std::uint64_t stable_seed(const ModelConfig& c, bool ignore_one = false, double min_gap = 1e-4) {
  for (std::uint64_t seed = 1; seed < 200; ++seed) {
    DoubleModel m(c, seed, ignore_one);
    const double gap = m.topk_gap();
    if (gap >= min_gap) {
      std::printf("seed %llu: smallest top-k probability gap %.3e\n", (unsigned long long)seed, gap);
      return seed;
    }
  }
  ADD_FAILURE() << "no seed with a stable top-k";
  return 1;
}

void run_case(const ModelConfig& c, const std::string& label, bool ignore_one = false,
              bool expect_drops = false) {
  const auto seed = stable_seed(c, ignore_one);
  DoubleModel m(c, seed, ignore_one);
  const auto res = m.forward();
  std::int64_t dropped = 0;
  for (const auto& r : res.routing) dropped += r.dropped;
  if (expect_drops) EXPECT_GT(dropped, 0) << "the capacity case must drop assignments";
  else EXPECT_EQ(dropped, 0);
  const auto errs = check_all(m, label);
  for (const auto& e : errs) {
    EXPECT_LE(e.rel, 1e-6) << label << ": " << e.name << " abs err " << e.abs << " (max|g| " << e.scale << ")";
    EXPECT_GT(e.scale, 1e-8) << label << ": " << e.name << " has a vanishing gradient: the check is vacuous";
  }
}

}  // namespace

TEST(TransformerGrad, DroplessMoE) { run_case(tiny(), "dropless"); }

TEST(TransformerGrad, CapacityWithDrops) {
  auto c = tiny();
  c.capacity_factor = 0.5;  // 3 slots per expert for 24 assignments: drops for sure
  run_case(c, "capacity", false, true);
}

TEST(TransformerGrad, SharedExperts) {
  auto c = tiny();
  c.n_shared_experts = 2;
  run_case(c, "shared");
}

TEST(TransformerGrad, TiedEmbeddings) {
  auto c = tiny();
  c.tie_embeddings = true;
  run_case(c, "tied", /*ignore_one=*/true);
}

TEST(TransformerGrad, DenseLayerMoeEvery2) {
  auto c = tiny();
  c.moe_every = 2;  // one MoE and one dense layer (cfg.is_moe_layer decides which)
  ASSERT_NE(c.is_moe_layer(0), c.is_moe_layer(1));
  run_case(c, "moe_every2");
}

namespace {
// tiny() with a dense and an MoE layer (with a shared expert) and rank-2
// adapters, scale 1.5, on `targets`.
ModelConfig lora_tiny(LoraTargets targets, double dropout = 0.0) {
  auto c = tiny();
  c.moe_every = 2;
  c.n_shared_experts = 1;
  c.lora.rank = 2;
  c.lora.alpha = 3.0;
  c.lora.dropout = dropout;
  c.lora.targets = targets;
  return c;
}
}  // namespace

// LoRA adapters on every projection they can target (B filled at random
// here, so that A's gradient is not zero): A and B against finite
// differences, and the frozen model's gradients too (computed, never used).
TEST(TransformerGrad, LoraAdapters) {
  const auto c = lora_tiny({true, true, true, true, true, true});
  int adapters = 0;
  for (const auto& s : parameter_specs(c)) adapters += s.name.find(".lora_") != std::string::npos;
  // wq wk wv wo per layer; dense, shared and routed experts' w1 w3 w2; the router; the embedding
  ASSERT_EQ(adapters, 2 * (2 * 4 + 3 + 3 + 3 + 1 + 1));
  run_case(c, "lora");
}

// With dropout on the adapters' input: the masks are fixed by the key, and
// backward must draw the forward's (a wrong mask in dx, dA or dB shows here).
TEST(TransformerGrad, LoraDropout) {
  run_case(lora_tiny({true, true, true, true, true, false}, 0.3), "lora_dropout");
}

// The same with a tied embedding: its adapters act in the LM head too.
TEST(TransformerGrad, LoraTiedEmbedding) {
  auto c = tiny();
  c.tie_embeddings = true;
  c.lora.rank = 2;
  c.lora.alpha = 3.0;
  c.lora.targets.attention = true;
  c.lora.targets.embeddings = true;
  run_case(c, "lora_tied", /*ignore_one=*/true);
}

// The distillation term coef T^2 KL(q || softmax(z / T)) of expert
// growth, against soft targets that are not the model's own, with one
// ignored target (its row adds nothing).
TEST(TransformerGrad, Distillation) {
  const ModelConfig c = tiny();
  const auto seed = stable_seed(c, true);
  DoubleModel m(c, seed, true);
  m.soft.probs = decltype(m.soft.probs)("soft", kB * kT, c.vocab_size);
  m.soft.neg_entropy = decltype(m.soft.neg_entropy)("soft_neg_entropy", kB * kT);
  exa::test::fill_uniform(m.soft.probs, 99, 0.05, 1.0);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.soft.probs);
  auto hn = Kokkos::create_mirror_view(m.soft.neg_entropy);
  for (std::size_t r = 0; r < h.extent(0); ++r) {
    double s = 0, nh = 0;
    for (std::size_t v = 0; v < h.extent(1); ++v) s += h(r, v) * h(r, v);
    for (std::size_t v = 0; v < h.extent(1); ++v) {
      h(r, v) = h(r, v) * h(r, v) / s;  // peaked, rows sum to 1
      nh += h(r, v) * std::log(h(r, v));
    }
    hn(r) = nh;
  }
  Kokkos::deep_copy(m.soft.probs, h);
  Kokkos::deep_copy(m.soft.neg_entropy, hn);
  m.tau = 2.0;
  m.coef = 0.7;
  const auto res = m.forward();
  EXPECT_GT(res.loss.distill, 1e-3) << "the teacher differs from the student: the term must be sizeable";
  EXPECT_NEAR(res.loss.loss, res.loss.ce + res.loss.aux + res.loss.z + res.loss.distill, 1e-12);
  for (const auto& e : check_all(m, "distill")) {
    EXPECT_LE(e.rel, 1e-6) << e.name << " abs err " << e.abs << " (max|g| " << e.scale << ")";
    EXPECT_GT(e.scale, 1e-8) << e.name << " has a vanishing gradient: the check is vacuous";
  }
}

// A teacher that is the student itself: its soft targets (written by the
// teacher side, soft_out) make the term zero and add no gradient.
TEST(TransformerGrad, DistillationFromItselfIsZero) {
  const ModelConfig c = tiny();
  DoubleModel m(c, stable_seed(c, true), true);
  typename Transformer<double>::Input in;
  in.tokens = m.inputs;
  in.targets = m.targets;
  exa::model::SoftTargets<double> probs;
  in.soft_out = &probs;
  in.temperature = 3.0;
  m.model.set_dropout_key(7);
  const auto plain = m.model.forward_input(m.w, in);
  ASSERT_EQ(probs.probs.extent(0), std::size_t(kB * kT));
  ASSERT_EQ(probs.probs.extent(1), std::size_t(c.vocab_size));
  Kokkos::deep_copy(m.grads, 0.0);
  m.model.backward(m.w, m.g, 1.0);
  auto g0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.grads);
  m.soft = probs;
  m.tau = 3.0;
  m.coef = 5.0;
  const auto res = m.forward();
  EXPECT_NEAR(res.loss.distill, 0.0, 1e-12);
  EXPECT_EQ(res.loss.ce, plain.loss.ce);
  Kokkos::deep_copy(m.grads, 0.0);
  m.model.backward(m.w, m.g, 1.0);
  auto g1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.grads);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g0.extent(0); ++i) {
    worst = std::max(worst, std::fabs(g1(i) - g0(i)));
    scale = std::max(scale, std::fabs(g0(i)));
  }
  EXPECT_LE(worst, 1e-12 * scale) << "a teacher equal to the student must add no gradient";
}

TEST(TransformerGrad, NoTopkRenormalisation) {
  auto c = tiny();
  c.norm_topk = false;
  run_case(c, "norm_topk_off");
}

TEST(TransformerGrad, EverythingAtOnce) {
  auto c = tiny();
  c.n_layers = 3;
  c.moe_every = 2;
  c.n_shared_experts = 1;
  c.capacity_factor = 0.75;
  c.tie_embeddings = true;
  c.norm_topk = false;
  c.top_k = 1;
  c.n_kv_heads = 1;  // multi-query
  run_case(c, "all_options", true, true);
}

// LSH attention (attention.kind = "lsh"): chunks of 2 sorted positions, no
// chunk back, two rounds, so each query sees a few of its earlier keys; the
// hashes are piecewise constant in the weights and h = 1e-6 crosses none.
TEST(TransformerGrad, LshAttention) {
  ModelConfig c = tiny();
  c.attention = {true, 2, 2, 0};
  run_case(c, "lsh");
}

// With one chunk over the whole sequence, the LSH model is the full one (same
// loss and gradients to rounding); with small chunks it is a different one.
TEST(TransformerGrad, LshOneChunkIsFullAttention) {
  ModelConfig full = tiny(), one = tiny(), sparse = tiny();
  one.attention = {true, 3, kT, 1};
  sparse.attention = {true, 1, 2, 0};
  DoubleModel a(full, 5), b(one, 5), s(sparse, 5);
  Kokkos::deep_copy(a.grads, 0.0);
  Kokkos::deep_copy(b.grads, 0.0);
  const double la = a.forward().loss.loss, lb = b.forward().loss.loss, ls = s.loss();
  a.model.backward(a.w, a.g, 1.0);
  b.model.backward(b.w, b.g, 1.0);
  const auto ga = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.grads);
  const auto gb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.grads);
  double w = 0;
  for (std::size_t i = 0; i < ga.extent(0); ++i) w = std::max(w, std::fabs(ga(i) - gb(i)));
  std::printf("[lsh one chunk] loss full %.15f lsh %.15f; max |grad diff| %.2e; sparse lsh loss %.15f\n", la, lb, w,
              ls);
  EXPECT_NEAR(la, lb, 1e-12);
  EXPECT_LE(w, 1e-12);
  EXPECT_GT(std::fabs(ls - la), 1e-6) << "chunks of 2 should change the attention";
}
