#pragma once
// Template definitions of StageModel<T, D> (stage_model.hpp). Included by
// stage_model.cpp, which instantiates <float, Device> and <double, Device>;
// include it directly only to instantiate another (T, D).
#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/profiling.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/stage_model.hpp"

namespace exa::model {

namespace stage_detail {

// dst[b,:] = src[b*T + pos, :]
template <class SV, class DV>
void gather_position(const SV& src, index_t Tn, index_t pos, const DV& dst) {
  using Exec = exec_of<DV>;
  const index_t nb = dst.extent(0), d = dst.extent(1);
  Kokkos::parallel_for(
      "exa::model::gather_position", Kokkos::RangePolicy<Exec>(0, nb * d), KOKKOS_LAMBDA(const index_t i) {
        const index_t b = i / d, c = i % d;
        dst(b, c) = src(b * Tn + pos, c);
      });
}

// Number of ids outside [lo, hi).
template <class IV>
index_t count_out_of_range(const IV& ids, index_t lo, index_t hi) {
  using Exec = exec_of<IV>;
  index_t bad = 0;
  Kokkos::parallel_reduce(
      "exa::model::check_tokens", Kokkos::RangePolicy<Exec>(0, ids.extent(0)),
      KOKKOS_LAMBDA(const index_t n, index_t& acc) { acc += (ids(n) < lo || ids(n) >= hi) ? 1 : 0; }, bad);
  return bad;
}

template <class V>
double sum_of(const V& v) {
  using Exec = exec_of<V>;
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::model::sum", Kokkos::RangePolicy<Exec>(0, v.extent(0)),
      KOKKOS_LAMBDA(const index_t n, double& acc) { acc += double(v(n)); }, s);
  return s;
}

}  // namespace stage_detail

template <class T, class D>
StageModel<T, D>::StageModel(const ModelConfig& cfg, ModelOptions opt)
    : StageModel(cfg, StagePlan::whole(cfg), Seams<T, D>::local(StagePlan::whole(cfg), opt.attention_tiles, cfg.attention), opt) {}

template <class T, class D>
StageModel<T, D>::StageModel(const ModelConfig& cfg, const StagePlan& plan, Seams<T, D> seams, ModelOptions opt)
    : cfg_(cfg), plan_(plan), seams_(std::move(seams)), opt_(opt) {
  EXA_REQUIRE(cfg_.n_heads > 0 && cfg_.d_model % cfg_.n_heads == 0,
              "StageModel: d_model {} is not a multiple of n_heads {}", cfg_.d_model, cfg_.n_heads);
  EXA_REQUIRE(cfg_.n_kv_heads > 0 && cfg_.n_heads % cfg_.n_kv_heads == 0,
              "StageModel: n_heads {} is not a multiple of n_kv_heads {}", cfg_.n_heads, cfg_.n_kv_heads);
  EXA_REQUIRE(cfg_.head_dim() % 2 == 0, "StageModel: head dim {} must be even for RoPE", cfg_.head_dim());
  EXA_REQUIRE(plan_.kv_heads > 0 && plan_.heads % plan_.kv_heads == 0,
              "StageModel: this rank's {} query heads are not a multiple of its {} key-value heads", plan_.heads,
              plan_.kv_heads);
  EXA_REQUIRE(plan_.n_layers == cfg_.n_layers && plan_.local_layers() >= 1,
              "StageModel: the plan's layers [{}, {}) of {} do not fit the model's {} layers", plan_.layer_begin,
              plan_.layer_end, plan_.n_layers, cfg_.n_layers);
  bool any_moe = false;
  for (const auto& [a, b] : plan_.layer_ranges())
    for (std::int64_t i = a; i < b; ++i) any_moe = any_moe || cfg_.is_moe_layer(i);
  if (any_moe)
    EXA_REQUIRE(cfg_.top_k >= 1 && cfg_.top_k <= cfg_.n_experts,
                "StageModel: top_k {} must be in [1, n_experts = {}]", cfg_.top_k, cfg_.n_experts);
  EXA_REQUIRE(seams_.column && seams_.row && seams_.replicated && seams_.attention &&
                  (!any_moe || seams_.dispatcher) && (!plan_.has_head() || seams_.loss_head) &&
                  (!plan_.has_embedding() || seams_.embedding),
              "StageModel: a seam implementation is missing (build the model through parallel::build_model)");

  const bool fence = opt_.fence_phases;
  if (plan_.has_embedding()) embedding_.emplace(plan_.vocab_begin, plan_.vocab_end, cfg_.vocab_size, seams_.embedding);
  // Tensor parallelism splits the norms' weight gradients over the rows
  // (sequence parallelism: each rank's norms see only their own rows).
  const RowShare norm_rows = plan_.sequence_parallel ? RowShare{} : RowShare{plan_.tp_rank, plan_.tp};
  const AttentionShape ashape{plan_.heads, plan_.kv_heads, cfg_.head_dim(), plan_.tp_rank * plan_.kv_heads};
  const MoeShape mshape{cfg_.n_experts, cfg_.top_k, cfg_.n_shared_experts, plan_.d_expert, cfg_.capacity_factor,
                        kernels::RouterOptions{cfg_.norm_topk, cfg_.aux_coef, cfg_.z_coef}};
  chunk_first_.push_back(0);
  for (const auto& [a, b] : plan_.layer_ranges()) {
    for (std::int64_t l = a; l < b; ++l) {
      auto attn = std::make_unique<AttentionBlock<T, D>>(l, ashape, cfg_.norm_eps, seams_.column, seams_.row,
                                                         seams_.attention, fence, norm_rows);
      std::unique_ptr<DenseMlp<T, D>> mlp;
      std::unique_ptr<MoeBlock<T, D>> moe;
      if (cfg_.is_moe_layer(l))
        moe = std::make_unique<MoeBlock<T, D>>(l, mshape, cfg_.norm_eps, seams_.column, seams_.row, seams_.replicated,
                                               seams_.dispatcher, fence, norm_rows, seams_.routing);
      else
        mlp = std::make_unique<DenseMlp<T, D>>(l, plan_.d_ff, cfg_.norm_eps, seams_.column, seams_.row, fence,
                                               norm_rows);
      layers_.emplace_back(l, std::move(attn), std::move(mlp), std::move(moe));
    }
    chunk_first_.push_back(layers_.size());
  }
  if (plan_.has_head()) final_norm_.emplace("norm.weight", cfg_.norm_eps, norm_rows);
}

template <class T, class D>
std::vector<std::string> StageModel<T, D>::param_names() const {
  std::vector<std::string> n;
  if (embedding_) n.push_back(Embedding<T, D>::param_name());
  for (const auto& l : layers_) {
    const auto ln = l.param_names();
    n.insert(n.end(), ln.begin(), ln.end());
  }
  if (final_norm_) {
    n.push_back(final_norm_->param_name());
    // Tied, the head reads the embedding (a second copy on a last stage
    // without the embedding).
    if (!cfg_.tie_embeddings) n.push_back("lm_head.weight");
    else if (!embedding_) n.push_back(Embedding<T, D>::param_name());
  }
  return n;
}

template <class T, class D>
MoeBlock<T, D>& StageModel<T, D>::router_of(std::int64_t layer, const char* what) {
  for (auto& l : layers_) {
    if (l.index() != layer) continue;
    EXA_REQUIRE(l.is_moe(), "StageModel::{}: layer {} is dense, it has no router", what, layer);
    return *l.moe();
  }
  throw Error(fmt::format("StageModel::{}: layer {} is not one of this stage's layers [{}, {})", what, layer,
                          plan_.layer_begin, plan_.layer_end));
}

template <class T, class D>
void StageModel<T, D>::set_router_bias(std::int64_t layer, const std::vector<float>& bias) {
  router_of(layer, "set_router_bias").set_router_bias(bias);
}

template <class T, class D>
void StageModel<T, D>::set_clone_ring(std::int64_t layer, const std::vector<int>& ring) {
  router_of(layer, "set_clone_ring").set_clone_ring(ring);
}

template <class T, class D>
void StageModel<T, D>::allocate(Context& c, MicroBatchShape shape, int chunk) const {
  const std::int64_t N = shape.N(), d = cfg_.d_model, V = plan_.vocab_end - plan_.vocab_begin;
  auto v1 = [](const char* l, std::int64_t a) { return V1(std::string("exa::model::") + l, a); };
  auto v2 = [](const char* l, std::int64_t a, std::int64_t b) { return V2(std::string("exa::model::") + l, a, b); };
  const std::int64_t Ns = plan_.stream_rows(N);  // residual stream, norms (sequence parallelism: this rank's rows)
  c = Context{};
  c.shape = shape;
  c.chunk = chunk;
  const std::size_t first = chunk_first_[std::size_t(chunk)];
  c.layers.resize(chunk_first_[std::size_t(chunk) + 1] - first);
  const std::int64_t seg = segment_layers(chunk);
  for (std::size_t i = first; i < first + c.layers.size(); ++i) {
    auto& lc = c.layers[i - first];
    if (std::int64_t(i - first) % seg == 0) lc.x = v2("x", Ns, d);
    if (opt_.recompute != Recompute::full) allocate_layer(lc, layers_[i].is_moe(), shape);
  }
  c.out = v2("h_final", Ns, d);
  if (chunk_has_embedding(chunk)) c.tokens = typename Context::Ids("exa::model::tokens", N);
  if (chunk_has_head(chunk)) {
    c.targets = typename Context::Ids("exa::model::targets", N);
    c.hf = v2("hf", Ns, d);
    c.logits = v2("logits", N, V);
    c.rstd_f = v1("rstd_final", Ns);
    c.ce_lse = v1("ce_lse", N);
  }
}

template <class T, class D>
void StageModel<T, D>::allocate_layer(LayerContext<T, D>& lc, bool moe, MicroBatchShape shape) const {
  const std::int64_t N = shape.N(), B = shape.B, Tn = shape.T, d = cfg_.d_model, H = plan_.heads,
                     Hkv = plan_.kv_heads, hd = cfg_.head_dim(), E = cfg_.n_experts, K = cfg_.top_k,
                     F = plan_.d_expert, S = cfg_.n_shared_experts, Fd = plan_.d_ff, Fs = plan_.d_shared;
  using L = LayerContext<T, D>;
  auto v1 = [](const char* l, std::int64_t a) { return V1(std::string("exa::model::") + l, a); };
  auto v2 = [](const char* l, std::int64_t a, std::int64_t b) { return V2(std::string("exa::model::") + l, a, b); };
  auto v3 = [](const char* l, std::int64_t a, std::int64_t b, std::int64_t e) {
    return typename L::V3(std::string("exa::model::") + l, a, b, e);
  };
  const std::int64_t Ns = plan_.stream_rows(N);
  // Selective recompute: one set of the cheap buffers for all contexts of a shape.
  const bool shared = opt_.recompute == Recompute::selective;
  // The routed experts' tensors in bf16 (LayerContext::xp16), where the
  // products are bf16, the dispatcher keeps them so, and no adapters sit
  // on the experts (LoRA keeps them in fp32; the dispatchers decide alike).
  const bool experts16 = kernels::matmul_precision() == kernels::MatmulPrecision::bf16 && seams_.dispatcher &&
                         seams_.dispatcher->stores_bf16() && !(cfg_.lora.enabled() && cfg_.lora.targets.experts);
  auto h2 = [](const char* l, std::int64_t a, std::int64_t b) {
    return typename L::H2(std::string("exa::model::") + l, a, b);
  };
  if (shared && (cheap_.shape != shape || cheap_.experts_bf16 != experts16)) {
    cheap_ = SharedCheap{};
    cheap_.shape = shape;
    cheap_.experts_bf16 = experts16;
    cheap_.xn = v2("shared_xn", Ns, d);
    const bool any_moe = std::any_of(layers_.begin(), layers_.end(), [](const auto& l) { return l.is_moe(); });
    if (any_moe && experts16) cheap_.eh16 = h2("shared_eh16", N * K, F);
    if (any_moe && !experts16) cheap_.eh = v2("shared_eh", N * K, F);
    if (any_moe && S > 0) cheap_.sh = v3("shared_sh", S, N, Fs);
    if (std::any_of(layers_.begin(), layers_.end(), [](const auto& l) { return !l.is_moe(); }))
      cheap_.h = v2("shared_h", N, Fd);
  }
  lc.shared_cheap = shared;
  auto cheap2 = [&](const V2& s, const char* l, std::int64_t a, std::int64_t b) { return shared ? s : v2(l, a, b); };
  lc.attn_rstd = v1("attn_rstd", Ns);
  lc.attn_xn = cheap2(cheap_.xn, "attn_xn", Ns, d);
  lc.q = v2("q", N, H * hd);
  lc.k = v2("k", N, Hkv * hd);
  lc.v = v2("v", N, Hkv * hd);
  lc.attn_o = v2("attn_o", N, H * hd);
  lc.attn_lse = v3("attn_lse", B, H, Tn);
  lc.x_mid = v2("x_mid", Ns, d);
  lc.ffn_rstd = v1("ffn_rstd", Ns);
  lc.ffn_xn = cheap2(cheap_.xn, "ffn_xn", Ns, d);
  if (moe) {
    lc.router_logits = v2("router_logits", N, E);
    lc.probs = v2("router_probs", N, E);
    lc.router_lse = v1("router_lse", N);
    lc.topk = typename L::I2("exa::model::topk", N, K);
    lc.gates = v2("gates", N, K);
    lc.counts = typename L::I1("exa::model::counts", E);
    const bool rows = !seams_.dispatcher || seams_.dispatcher->keeps_permuted_rows();
    if (experts16) {
      if (rows) lc.xp16 = h2("xp16", N * K, d);
      lc.ea16 = h2("ea16", N * K, F);
      lc.eb16 = h2("eb16", N * K, F);
      lc.eh16 = shared ? cheap_.eh16 : h2("eh16", N * K, F);
    } else {
      if (rows) lc.xp = v2("xp", N * K, d);
      lc.ea = v2("ea", N * K, F);
      lc.eb = v2("eb", N * K, F);
      lc.eh = cheap2(cheap_.eh, "eh", N * K, F);
    }
    lc.yp = v2("yp", N * K, d);
    if (S > 0) {
      lc.sa = v3("sa", S, N, Fs);
      lc.sb = v3("sb", S, N, Fs);
      lc.sh = shared ? cheap_.sh : v3("sh", S, N, Fs);
    }
  } else {
    lc.a = v2("a", N, Fd);
    lc.b = v2("b", N, Fd);
    lc.h = cheap2(cheap_.h, "h", N, Fd);
  }
}

template <class T, class D>
LayerContext<T, D>& StageModel<T, D>::layer_context(Context& c, std::size_t i, const TransformerLayer<T, D>& layer) {
  const std::uint64_t key = lora::key(c.lora_key, std::uint64_t(layer.index()));
  LayerContext<T, D>& lc = opt_.recompute != Recompute::full ? c.layers[i] : (layer.is_moe() ? work_moe_ : work_dense_);
  if (opt_.recompute == Recompute::full) lc.x = layer_input(c, i);
  lc.lora_key = key;
  lc.doc_start = c.doc_start.data();
  lc.doc_end = c.doc_end.data();
  lc.doc_stride = index_t(c.doc_start.extent(1));
  return lc;
}

template <class T, class D>
std::int64_t StageModel<T, D>::segment_layers(int chunk) const {
  if (opt_.recompute != Recompute::full) return 1;
  const std::int64_t n = std::int64_t(chunk_first_[std::size_t(chunk) + 1] - chunk_first_[std::size_t(chunk)]);
  std::int64_t seg = opt_.checkpoint_layers;
  if (seg == kSqrtLayers) {
    seg = 1;
    while (seg * seg < n) ++seg;
  }
  return std::max<std::int64_t>(1, std::min(seg, std::max<std::int64_t>(n, 1)));
}

template <class T, class D>
typename StageModel<T, D>::V2 StageModel<T, D>::layer_input(Context& c, std::size_t i) const {
  const std::int64_t seg = segment_layers(c.chunk), k = std::int64_t(i) % seg;
  return k == 0 ? c.layers[i].x : segment_x_[std::size_t(k - 1)];
}

template <class T, class D>
void StageModel<T, D>::ensure_scratch(MicroBatchShape shape) {
  index_t positions = shape.T;  // context parallelism: the rows sit further into the sequence
  for (const auto& ch : seams_.attention->token_chunks(shape.T)) positions = std::max(positions, ch.pos + ch.len);
  if (rope_.max_pos() < positions)
    rope_ = kernels::make_rope_table<T, D>(positions, cfg_.head_dim(), cfg_.rope_theta);
  if (shape == scratch_shape_) return;
  scratch_shape_ = shape;
  const std::int64_t N = shape.N(), d = cfg_.d_model, H = plan_.heads, Hkv = plan_.kv_heads, hd = cfg_.head_dim(),
                     E = cfg_.n_experts, K = cfg_.top_k, S = cfg_.n_shared_experts, Fd = plan_.d_ff,
                     Fs = plan_.d_shared;
  auto v2 = [](const char* l, std::int64_t a, std::int64_t b) { return V2(std::string("exa::model::") + l, a, b); };
  const std::int64_t Ns = plan_.stream_rows(N);
  auto& s = scratch_;
  s = LayerScratch<T, D>{};
  s.dres = v2("dres", Ns, d);
  s.dxn = v2("dxn", Ns, d);
  s.dq = v2("dq", N, H * hd);
  s.dk = v2("dk", N, Hkv * hd);
  s.dv = v2("dv", N, Hkv * hd);
  s.dout = v2("do", N, H * hd);
  const bool any_moe = std::any_of(layers_.begin(), layers_.end(), [](const auto& l) { return l.is_moe(); });
  const bool any_dense = std::any_of(layers_.begin(), layers_.end(), [](const auto& l) { return !l.is_moe(); });
  if (any_dense) {
    s.dda = v2("dda", N, Fd);
    s.ddb = v2("ddb", N, Fd);
    s.ddh = v2("ddh", N, Fd);
  }
  if (opt_.recompute == Recompute::full) {
    if (any_moe) allocate_layer(work_moe_, true, shape);
    if (any_dense) allocate_layer(work_dense_, false, shape);
    recompute_out_ = v2("recompute_out", Ns, d);
    std::int64_t seg = 1;
    for (int ch = 0; ch < n_chunks(); ++ch) seg = std::max(seg, segment_layers(ch));
    segment_x_.clear();
    for (std::int64_t k = 1; k < seg; ++k) segment_x_.push_back(v2("segment_x", Ns, d));
  }
  if (any_moe) {
    s.dgates = v2("dgates", N, K);
    s.drouter = v2("drouter", N, E);
    s.moe_y = v2("moe_y", Ns, d);
    if (S > 0) {
      s.dsa = v2("dsa", N, Fs);
      s.dsb = v2("dsb", N, Fs);
      s.dsh = v2("dsh", N, Fs);
    }
  }
}

template <class T, class D>
typename StageModel<T, D>::Context& StageModel<T, D>::acquire(MicroBatchShape shape, int chunk) {
  EXA_REQUIRE(chunk >= 0 && chunk < n_chunks(), "StageModel: chunk {} is not one of this stage's {}", chunk,
              n_chunks());
  EXA_REQUIRE(shape.B > 0 && shape.T > 0, "StageModel: empty micro-batch [{}, {}]", shape.B, shape.T);
  EXA_REQUIRE(!plan_.sequence_parallel || shape.N() % plan_.tp == 0,
              "StageModel: sequence parallelism splits the {} tokens of a micro-batch over tp = {} ranks: choose "
              "model.seq_len divisible by tp", shape.N(), plan_.tp);
  for (auto& p : pool_)
    if (!p->live && p->shape == shape && p->chunk == chunk) return *p;
  for (auto& p : pool_)
    if (!p->live) {
      allocate(*p, shape, chunk);
      return *p;
    }
  pool_.push_back(std::make_unique<Context>());
  allocate(*pool_.back(), shape, chunk);
  return *pool_.back();
}

template <class T, class D>
typename StageModel<T, D>::Ids StageModel<T, D>::flat(const Tokens& t, const char* what) const {
  EXA_REQUIRE(t.span_is_contiguous(), "StageModel: {} must be a contiguous [B,T] array", what);
  return Ids(t.data(), t.extent(0) * t.extent(1));
}

template <class T, class D>
void StageModel<T, D>::check_weights(const W& w, const char* what) const {
  EXA_REQUIRE(std::int64_t(w.layers.size()) == cfg_.n_layers, "StageModel::{}: weights have {} layers, the model {}",
              what, w.layers.size(), cfg_.n_layers);
}

template <class T, class D>
kernels::RouterLosses StageModel<T, D>::run_layers(Context& c, const W& w, const Input& in,
                                                   std::vector<LayerRouting>* routing) {
  const std::int64_t N = c.shape.N();
  const std::size_t first = chunk_first_[std::size_t(c.chunk)];
  load_documents(c, in.documents);
  if (chunk_has_embedding(c.chunk)) {
    hooks_.before_forward(0);
    ScopedRegion region("forward/embed", opt_.fence_phases);
    Kokkos::deep_copy(c.tokens, flat(in.tokens, "inputs"));
    const index_t bad = stage_detail::count_out_of_range(c.tokens, 0, cfg_.vocab_size);
    EXA_REQUIRE(bad == 0, "StageModel: {} input tokens lie outside the vocabulary [0, {})", bad, cfg_.vocab_size);
    embedding_->forward(c.tokens, w.embed, c.layers.empty() ? c.out : c.layers[0].x,
                        lora::adapter<T, D>(w.lora_embed, w.lora_scale));
  } else {
    // The residual stream's rows: this rank's 1/tp under sequence parallelism.
    const std::int64_t Ns = plan_.stream_rows(N);
    EXA_REQUIRE(std::int64_t(in.hidden.extent(0)) == Ns && std::int64_t(in.hidden.extent(1)) == cfg_.d_model,
                "StageModel: stage [{}, {}) takes the previous stage's [{}, {}] output, got [{}, {}]",
                plan_.layer_begin, plan_.layer_end, Ns, cfg_.d_model, in.hidden.extent(0), in.hidden.extent(1));
    Kokkos::deep_copy(c.layers[0].x, in.hidden);
  }
  kernels::RouterLosses sum;
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const auto& layer = layers_[first + i];
    const std::int64_t l = layer.index();
    const auto& lw = w.layers[std::size_t(l)];
    hooks_.before_forward(static_cast<int>(l) + 1);
    EXA_REQUIRE(lw.moe == layer.is_moe(), "StageModel: weights of layer {} are {} but the model's layer is {}",
                l, lw.moe ? "MoE" : "dense", lw.moe ? "dense" : "MoE");
    const V2 out = i + 1 < c.layers.size() ? layer_input(c, i + 1) : c.out;
    auto& lc = layer_context(c, i, layer);
    // Only this forward's routing is news to the hooks: a recomputation in
    // backward (which may reuse this context for another layer under full
    // recompute) finds the experts already brought in by before_backward.
    lc.on_routed = [this, u = static_cast<int>(l) + 1](const std::vector<std::uint8_t>& used) {
      hooks_.experts_routed(u, used);
    };
    const auto rl = layer.forward(lc, lw, c.shape, rope_, out, scratch_, routing);
    lc.on_routed = nullptr;
    hooks_.after_forward(static_cast<int>(l) + 1, lc.experts_used);
    sum.aux += rl.aux;
    sum.z += rl.z;
  }
  return sum;
}

template <class T, class D>
void StageModel<T, D>::load_documents(Context& c, const DocumentSpans<D>& docs) const {
  if (!docs.on()) {
    c.doc_start = {};
    c.doc_end = {};
    return;
  }
  const std::int64_t B = std::int64_t(docs.start.extent(0)), Tw = std::int64_t(docs.start.extent(1));
  EXA_REQUIRE(B == c.shape.B && Tw >= c.shape.T && docs.end.extent(0) == docs.start.extent(0) &&
                  docs.end.extent(1) == docs.start.extent(1),
              "StageModel: documents [{}, {}] (start) and [{}, {}] (end) do not cover the micro-batch's {} "
              "sequences of {} rows",
              B, Tw, docs.end.extent(0), docs.end.extent(1), c.shape.B, c.shape.T);
  if (c.doc_start.extent(0) != docs.start.extent(0) || c.doc_start.extent(1) != docs.start.extent(1)) {
    c.doc_start = Kokkos::View<std::int32_t**, Layout, D>("exa::model::doc_start", B, Tw);
    c.doc_end = Kokkos::View<std::int32_t**, Layout, D>("exa::model::doc_end", B, Tw);
  }
  Kokkos::deep_copy(c.doc_start, docs.start);
  Kokkos::deep_copy(c.doc_end, docs.end);
}

template <class T, class D>
void StageModel<T, D>::load_targets(Context& c, const Tokens& targets) const {
  Kokkos::deep_copy(c.targets, flat(targets, "targets"));
  const index_t bad = stage_detail::count_out_of_range(c.targets, -0x7fffffff, cfg_.vocab_size);
  EXA_REQUIRE(bad == 0, "StageModel: {} targets are >= the vocabulary size {}", bad, cfg_.vocab_size);
}

template <class T, class D>
void StageModel<T, D>::write_soft_targets(const Context& c, const Input& in) const {
  if (in.soft_out == nullptr) return;
  auto& s = *in.soft_out;
  if (s.probs.extent(0) != c.logits.extent(0) || s.probs.extent(1) != c.logits.extent(1)) {
    s.probs = V2("exa::distill::teacher_probs", c.logits.extent(0), c.logits.extent(1));
    s.neg_entropy = Kokkos::View<double*, Layout, D>("exa::distill::teacher_neg_entropy", c.logits.extent(0));
  }
  seams_.loss_head->soft_targets(c, in.temperature, s);
}

template <class T, class D>
void StageModel<T, D>::add_distillation(Context& c, const Input& in) const {
  c.distill.teacher = {};
  if (in.soft_in.probs.data() == nullptr) return;
  EXA_REQUIRE(in.temperature > 0, "StageModel: distillation needs a temperature > 0, got {}", in.temperature);
  c.distill.teacher = in.soft_in;
  c.distill.tau = in.temperature;
  c.distill.coef = in.distill_coef;
  if (c.distill.lse.extent(0) != c.logits.extent(0))
    c.distill.lse = Kokkos::View<double*, Layout, D>("exa::distill::lse", c.logits.extent(0));
  const double kl = seams_.loss_head->distill(c);
  c.result.loss.distill =
      c.n_valid > 0 ? in.distill_coef * in.temperature * in.temperature * kl / double(c.n_valid) : 0.0;
}

template <class T, class D>
typename StageModel<T, D>::Context& StageModel<T, D>::forward(const W& w, const Input& in) {
  check_weights(w, "forward");
  MicroBatchShape shape = in.shape;
  if (chunk_has_embedding(in.chunk)) shape = {std::int64_t(in.tokens.extent(0)), std::int64_t(in.tokens.extent(1))};
  if (chunk_has_head(in.chunk))
    EXA_REQUIRE(std::int64_t(in.targets.extent(0)) == shape.B && std::int64_t(in.targets.extent(1)) == shape.T,
                "StageModel::forward: inputs [{}, {}] and targets [{}, {}] differ in shape", shape.B, shape.T,
                in.targets.extent(0), in.targets.extent(1));
  Context& c = acquire(shape, in.chunk);
  // A training forward: LoRA's dropout draws this micro-batch's masks.
  c.lora_key = cfg_.lora.dropout > 0 ? lora::key(dropout_key_, ++forwards_) : 0;
  ensure_scratch(shape);
  c.result = ForwardResult{};
  c.result.n_tokens = shape.N();
  c.result.task = in.task;
  const auto rl = run_layers(c, w, in, &c.result.routing);
  if (chunk_has_head(c.chunk)) {
    ScopedRegion region("forward/head", opt_.fence_phases);
    load_targets(c, in.targets);
    hooks_.before_forward(head_unit());
    final_norm_->forward(c.out, w.norm, c.hf, c.rstd_f);
    const auto ce = seams_.loss_head->forward(c, w.lm_head, head_adapter(w));
    c.n_valid = ce.n_valid;
    c.result.n_valid = ce.n_valid;
    c.result.ce_sum = ce.loss_sum;
    EXA_REQUIRE(in.ce_denominator >= 0, "StageModel::forward: a negative cross-entropy denominator ({})",
                in.ce_denominator);
    c.ce_weight = in.ce_denominator > 0 ? double(ce.n_valid) / in.ce_denominator : 1.0;
    c.result.loss.ce = in.ce_denominator > 0 ? ce.loss_sum / in.ce_denominator : ce.mean();
    write_soft_targets(c, in);
    add_distillation(c, in);
    c.result.loss.distill *= c.ce_weight;
  } else {
    c.distill.teacher = {};
  }
  c.result.loss.aux = rl.aux;
  c.result.loss.z = rl.z;
  c.result.loss.loss = c.result.loss.ce + c.result.loss.aux + c.result.loss.z + c.result.loss.distill;
  c.live = true;
  return c;
}

template <class T, class D>
void StageModel<T, D>::backward(Context& c, const W& w, const W& g, double loss_scale, const V2& d_out,
                                const V2& d_in) {
  const bool ours = std::any_of(pool_.begin(), pool_.end(), [&](const auto& p) { return p.get() == &c; });
  EXA_REQUIRE(ours && c.live, "StageModel::backward needs a context returned by this model's forward() and not "
              "yet consumed (backward() and release() give it back)");
  check_weights(w, "backward");
  check_weights(g, "backward (gradients)");
  ensure_scratch(c.shape);
  auto& s = scratch_;
  const std::int64_t Ns = plan_.stream_rows(c.shape.N());  // the boundary tensors' rows
  const std::size_t first = chunk_first_[std::size_t(c.chunk)];
  if (chunk_has_head(c.chunk)) {
    hooks_.before_backward(head_unit());
    {
      ScopedRegion region("backward/head", opt_.fence_phases);
      seams_.loss_head->backward(c, w.lm_head, loss_scale * c.ce_weight, s.dxn, g.lm_head, head_adapter(w, &g));
      final_norm_->backward(c.out, w.norm, c.rstd_f, s.dxn, s.dres, g.norm, /*accumulate_dx=*/false);
    }
    hooks_.after_backward(head_unit());
  } else {
    EXA_REQUIRE(std::int64_t(d_out.extent(0)) == Ns && std::int64_t(d_out.extent(1)) == cfg_.d_model,
                "StageModel::backward: stage [{}, {}) needs d(loss)/d(output) [{}, {}], got [{}, {}]",
                plan_.layer_begin, plan_.layer_end, Ns, cfg_.d_model, d_out.extent(0), d_out.extent(1));
    Kokkos::deep_copy(s.dres, d_out);
  }
  const std::size_t seg = std::size_t(segment_layers(c.chunk));
  for (std::size_t i = c.layers.size(); i-- > 0;) {
    const auto& layer = layers_[first + i];
    const std::int64_t l = layer.index();
    const bool segment_end = (i + 1) % seg == 0 || i + 1 == c.layers.size();
    if (segment_end && i % seg != 0) {
      // The last layer of a segment: its earlier layers' inputs again,
      // forward from the segment's first input (their weights gathered
      // again under ZeRO 3).
      ScopedRegion region("backward/recompute", opt_.fence_phases);
      for (std::size_t j = i - i % seg; j < i; ++j) {
        const auto& lj = layers_[first + j];
        hooks_.before_recompute(static_cast<int>(lj.index()) + 1);
        lj.forward(layer_context(c, j, lj), w.layers[std::size_t(lj.index())], c.shape, rope_, layer_input(c, j + 1),
                   s, nullptr);
      }
    }
    hooks_.before_backward(static_cast<int>(l) + 1);
    LayerContext<T, D>& lc = layer_context(c, i, layer);
    if (opt_.recompute == Recompute::full) {
      // The layer's weights are in place (before_backward); no routing
      // statistics: the forward already counted them.
      ScopedRegion region("backward/recompute", opt_.fence_phases);
      layer.forward(lc, w.layers[std::size_t(l)], c.shape, rope_, recompute_out_, s, nullptr);
    }
    layer.backward(lc, w.layers[std::size_t(l)], g.layers[std::size_t(l)], c.shape, rope_, loss_scale, s);
    hooks_.after_backward(static_cast<int>(l) + 1);
  }
  if (chunk_has_embedding(c.chunk)) {
    hooks_.before_backward(0);
    {
      ScopedRegion region("backward/embed", opt_.fence_phases);
      embedding_->backward(c.tokens, s.dres, g.embed, lora::adapter<T, D>(w.lora_embed, w.lora_scale, &g.lora_embed));
    }
    hooks_.after_backward(0);
  } else {
    EXA_REQUIRE(std::int64_t(d_in.extent(0)) == Ns && std::int64_t(d_in.extent(1)) == cfg_.d_model,
                "StageModel::backward: stage [{}, {}) returns d(loss)/d(input) [{}, {}] but d_in is [{}, {}]",
                plan_.layer_begin, plan_.layer_end, Ns, cfg_.d_model, d_in.extent(0), d_in.extent(1));
    Kokkos::deep_copy(d_in, s.dres);
  }
  c.live = false;
}

template <class T, class D>
void StageModel<T, D>::release(Context& c) {
  c.live = false;
}

template <class T, class D>
kernels::CrossEntropySum StageModel<T, D>::eval(const W& w, const Tokens& inputs, const Tokens& targets,
                                                const V1& ce) {
  EXA_REQUIRE(embedding_ && final_norm_, "StageModel::eval needs the whole model (this stage holds layers [{}, {}))",
              plan_.layer_begin, plan_.layer_end);
  Input in;
  in.tokens = inputs;
  return eval(w, in, targets, ce);
}

template <class T, class D>
kernels::CrossEntropySum StageModel<T, D>::eval(const W& w, const Input& in, const Tokens& targets, const V1& ce) {
  EXA_REQUIRE(final_norm_ && n_chunks() == 1,
              "StageModel::eval needs the stage that holds the LM head in one chunk (this stage holds layers [{}, {}))",
              plan_.layer_begin, plan_.layer_end);
  const MicroBatchShape shape =
      embedding_ ? MicroBatchShape{std::int64_t(in.tokens.extent(0)), std::int64_t(in.tokens.extent(1))} : in.shape;
  EXA_REQUIRE(std::int64_t(targets.extent(0)) == shape.B && std::int64_t(targets.extent(1)) == shape.T,
              "StageModel::eval: inputs [{}, {}] and targets [{}, {}] differ in shape", shape.B, shape.T,
              targets.extent(0), targets.extent(1));
  check_weights(w, "eval");
  Context& c = acquire(shape);
  c.lora_key = 0;  // evaluation: no dropout
  ensure_scratch(shape);
  EXA_REQUIRE(std::int64_t(ce.extent(0)) == shape.N(), "StageModel::eval: ce has {} entries, the batch {} tokens",
              ce.extent(0), shape.N());
  run_layers(c, w, in, nullptr);
  ScopedRegion region("forward/head", opt_.fence_phases);
  load_targets(c, targets);
  hooks_.before_forward(head_unit());
  final_norm_->forward(c.out, w.norm, c.hf, c.rstd_f);
  kernels::CrossEntropySum s;
  s.n_valid = shape.N() - stage_detail::count_out_of_range(c.targets, 0, cfg_.vocab_size);  // targets < 0 ignored
  if (in.soft_out != nullptr) {
    // A distillation teacher: its soft targets only, no cross-entropy.
    seams_.loss_head->project(c, w.lm_head, head_adapter(w));
    write_soft_targets(c, in);
    return s;
  }
  seams_.loss_head->eval(c, w.lm_head, ce, head_adapter(w));
  s.loss_sum = stage_detail::sum_of(ce);
  return s;
}

template <class T, class D>
void StageModel<T, D>::next_logits(const W& w, const Tokens& inputs, const V2& out, std::int64_t pos) {
  EXA_REQUIRE(embedding_ && final_norm_,
              "StageModel::next_logits needs the whole model (this stage holds layers [{}, {}))", plan_.layer_begin,
              plan_.layer_end);
  Input in;
  in.tokens = inputs;
  next_logits(w, in, out, pos);
}

template <class T, class D>
void StageModel<T, D>::next_logits(const W& w, const Input& in, const V2& out, std::int64_t pos) {
  EXA_REQUIRE(final_norm_ && n_chunks() == 1,
              "StageModel::next_logits needs the stage that holds the LM head in one chunk (this stage holds "
              "layers [{}, {}))",
              plan_.layer_begin, plan_.layer_end);
  check_weights(w, "next_logits");
  EXA_REQUIRE(!plan_.sequence_parallel, "StageModel::next_logits: generation runs without sequence parallelism");
  const MicroBatchShape shape =
      embedding_ ? MicroBatchShape{std::int64_t(in.tokens.extent(0)), std::int64_t(in.tokens.extent(1))} : in.shape;
  const std::int64_t B = shape.B, Tn = shape.T;
  if (pos < 0) pos = Tn - 1;
  EXA_REQUIRE(pos < Tn, "StageModel::next_logits: position {} is beyond the {} tokens given", pos, Tn);
  EXA_REQUIRE(std::int64_t(out.extent(0)) == B && std::int64_t(out.extent(1)) == cfg_.vocab_size,
              "StageModel::next_logits: out is {}x{}, expected {}x{}", out.extent(0), out.extent(1), B,
              cfg_.vocab_size);
  Context& c = acquire(shape);
  c.lora_key = 0;  // evaluation: no dropout
  ensure_scratch(shape);
  run_layers(c, w, in, nullptr);
  ScopedRegion region("forward/head", opt_.fence_phases);
  V2 h("exa::model::next_h", B, cfg_.d_model), hn("exa::model::next_hn", B, cfg_.d_model);
  V1 rstd("exa::model::next_rstd", B);
  stage_detail::gather_position(c.out, Tn, pos, h);
  hooks_.before_forward(head_unit());
  final_norm_->forward(h, w.norm, hn, rstd);
  seams_.loss_head->logits(hn, w.lm_head, out, head_adapter(w));
}

template <class T, class D>
int StageModel<T, D>::live_contexts() const {
  return static_cast<int>(std::count_if(pool_.begin(), pool_.end(), [](const auto& p) { return p->live; }));
}

template <class T, class D>
std::size_t StageModel<T, D>::activation_bytes() const {
  std::size_t n = 0;
  for (const auto& p : pool_) n += p->bytes();
  // The work contexts' x is a context's input, counted above.
  for (const auto* w : {&work_moe_, &work_dense_}) n += w->bytes() - w->x.span() * sizeof(T);
  for (const auto& x : segment_x_) n += x.span() * sizeof(T);
  return n + recompute_out_.span() * sizeof(T) + cheap_.bytes();
}

}  // namespace exa::model
