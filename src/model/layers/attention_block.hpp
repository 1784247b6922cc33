#pragma once
// The attention sub-block of a layer: x_mid = x + wo(Attn(rope(wq xn),
// rope(wk xn), wv xn)) with xn = RMSNorm(x). Projections go through the
// Linear seam (wq/wk/wv column-parallel, wo row-parallel), the attention
// itself through CoreAttention. Head counts are this rank's.
#include <memory>
#include <string>

#include "core/profiling.hpp"
#include "core/types.hpp"
#include "kernels/rope.hpp"
#include "model/activation_context.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/scratch.hpp"
#include "model/seams/core_attention.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/weights.hpp"

namespace exa::model {

struct AttentionShape {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;  // local heads
  std::int64_t kv_head_begin = 0;                      // global index of local kv head 0
};

template <class T, class D = Device>
class AttentionBlock {
 public:
  using Rope = kernels::RopeTable<T, D>;
  using LinearP = std::shared_ptr<const Linear<T, D>>;

  AttentionBlock(std::int64_t layer, AttentionShape shape, double norm_eps, LinearP column, LinearP row,
                 std::shared_ptr<const CoreAttention<T, D>> core, bool fence, RowShare norm_grad_rows = {})
      : prefix_("layers." + std::to_string(layer) + "."),
        layer_(layer),
        shape_(shape),
        norm_(prefix_ + "attn_norm.weight", norm_eps, norm_grad_rows),
        column_(std::move(column)),
        row_(std::move(row)),
        core_(std::move(core)),
        fence_(fence) {}

  const AttentionShape& shape() const { return shape_; }
  std::vector<std::string> param_names() const {
    return {norm_.param_name(), prefix_ + "attn.wq.weight", prefix_ + "attn.wk.weight", prefix_ + "attn.wv.weight",
            prefix_ + "attn.wo.weight"};
  }

  // c.x -> c.x_mid (and the activations backward needs).
  void forward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, MicroBatchShape mb, const Rope& rope) const {
    ScopedRegion region("forward/attn", fence_);
    norm_.forward(c.x, lw.attn_norm, c.attn_xn, c.attn_rstd);
    column_->forward(c.attn_xn, lw.wq, c.q, false, lora::in(c, lw, lw.lora_wq, 1));
    column_->forward(c.attn_xn, lw.wk, c.k, false, lora::in(c, lw, lw.lora_wk, 2));
    column_->forward(c.attn_xn, lw.wv, c.v, false, lora::in(c, lw, lw.lora_wv, 3));
    const auto q4 = heads(c.q, mb, shape_.heads), k4 = heads(c.k, mb, shape_.kv_heads);
    const auto v4 = heads(c.v, mb, shape_.kv_heads), o4 = heads(c.attn_o, mb, shape_.heads);
    const auto chunks = core_->token_chunks(mb.T);
    const kernels::RopeDocuments docs{c.doc_start, c.doc_stride};
    for_chunks(chunks, q4, [&](const auto& x, index_t pos) { kernels::rope_forward(x, rope, pos, {}, docs); });
    for_chunks(chunks, k4, [&](const auto& x, index_t pos) { kernels::rope_forward(x, rope, pos, {}, docs); });
    core_->forward(q4, k4, v4, o4, c.attn_lse, positions(chunks, c));
    Kokkos::deep_copy(c.x_mid, c.x);
    row_->forward(c.attn_o, lw.wo, c.x_mid, /*accumulate=*/true, lora::in(c, lw, lw.lora_wo, 4));
  }

  // s.dres holds d(loss)/d(x_mid) on entry and d(loss)/d(x) on return.
  void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                MicroBatchShape mb, const Rope& rope, LayerScratch<T, D>& s) const {
    ScopedRegion region("backward/attn", fence_);
    row_->backward(c.attn_o, lw.wo, s.dres, s.dout, lg.wo, false, lora::in(c, lw, lw.lora_wo, 4, &lg.lora_wo));
    const auto q4 = heads(c.q, mb, shape_.heads), k4 = heads(c.k, mb, shape_.kv_heads);
    const auto v4 = heads(c.v, mb, shape_.kv_heads), o4 = heads(c.attn_o, mb, shape_.heads);
    const auto do4 = heads(s.dout, mb, shape_.heads), dq4 = heads(s.dq, mb, shape_.heads);
    const auto dk4 = heads(s.dk, mb, shape_.kv_heads), dv4 = heads(s.dv, mb, shape_.kv_heads);
    const auto chunks = core_->token_chunks(mb.T);
    core_->backward(do4, q4, k4, v4, o4, c.attn_lse, dq4, dk4, dv4, positions(chunks, c));
    const kernels::RopeDocuments docs{c.doc_start, c.doc_stride};
    for_chunks(chunks, dq4, [&](const auto& x, index_t pos) { kernels::rope_backward(x, rope, pos, {}, docs); });
    for_chunks(chunks, dk4, [&](const auto& x, index_t pos) { kernels::rope_backward(x, rope, pos, {}, docs); });
    if (c.shared_cheap) norm_.forward(c.x, lw.attn_norm, c.attn_xn, c.attn_rstd);  // selective recompute
    column_->backward(c.attn_xn, lw.wq, s.dq, s.dxn, lg.wq, /*accumulate_dx=*/false,
                      lora::in(c, lw, lw.lora_wq, 1, &lg.lora_wq));
    column_->backward(c.attn_xn, lw.wk, s.dk, s.dxn, lg.wk, true, lora::in(c, lw, lw.lora_wk, 2, &lg.lora_wk));
    column_->backward(c.attn_xn, lw.wv, s.dv, s.dxn, lg.wv, true, lora::in(c, lw, lw.lora_wv, 3, &lg.lora_wv));
    norm_.backward(c.x, lw.attn_norm, c.attn_rstd, s.dxn, s.dres, lg.attn_norm, /*accumulate_dx=*/true);
  }

 private:
  using A4 = typename CoreAttention<T, D>::A4;
  A4 heads(const Kokkos::View<T**, Layout, D>& x, MicroBatchShape mb, std::int64_t h) const {
    return kernels::view_as_bthd(x, mb.B, mb.T, h, shape_.head_dim);
  }
  // Queries and keys of one chunk start at its position; the seam places
  // the rows of several chunks itself. The documents come along.
  AttentionPositions positions(const std::vector<TokenChunk>& chunks, const LayerContext<T, D>& c) const {
    const index_t p = chunks.size() == 1 ? chunks[0].pos : 0;
    return {p, p, c.doc_start, c.doc_end, c.doc_stride, layer_, shape_.kv_head_begin};
  }
  // f(rows of x in the chunk, the chunk's first position) for each chunk; x
  // itself when one chunk covers every row.
  template <class F>
  static void for_chunks(const std::vector<TokenChunk>& chunks, const A4& x, F&& f) {
    if (chunks.size() == 1 && chunks[0].row == 0 && chunks[0].len == index_t(x.extent(1))) {
      f(x, chunks[0].pos);
      return;
    }
    for (const auto& ch : chunks)
      f(Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(ch.row, ch.row + ch.len), Kokkos::ALL, Kokkos::ALL),
        ch.pos);
  }

  std::string prefix_;
  std::int64_t layer_;
  AttentionShape shape_;
  RMSNorm<T, D> norm_;
  LinearP column_, row_;
  std::shared_ptr<const CoreAttention<T, D>> core_;
  bool fence_;
};

}  // namespace exa::model
