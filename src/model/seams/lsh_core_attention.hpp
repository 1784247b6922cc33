#pragma once
// The CoreAttention of attention.kind = "lsh": kernels/lsh_attention.hpp on
// this rank's heads (docs/architecture.md, "LSH attention"). The rotations
// are keyed by the calling layer and the global kv head, so a tensor-parallel
// rank's heads hash as the whole model's. It takes whole sequences only:
// under context parallelism the all-to-all mode hands it whole sequences of
// a share of the heads, and the deck refuses the ring mode.
#include "core/error.hpp"
#include "kernels/lsh_attention.hpp"
#include "model/seams/core_attention.hpp"

namespace exa::model {

template <class T, class D = Device>
class LshCoreAttention final : public CoreAttention<T, D> {
 public:
  using typename CoreAttention<T, D>::A4;
  using typename CoreAttention<T, D>::Lse;

  explicit LshCoreAttention(kernels::LshConfig cfg) : cfg_(cfg) {}

  void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
               AttentionPositions pos) const override {
    kernels::lsh_attention_forward(q, k, v, out, lse, config(pos), offsets(pos));
  }
  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, AttentionPositions pos) const override {
    kernels::lsh_attention_backward(dout, q, k, v, out, lse, dq, dk, dv, config(pos), offsets(pos));
  }

 private:
  kernels::LshConfig config(const AttentionPositions& pos) const {
    kernels::LshConfig c = cfg_;
    c.layer = pos.layer;
    c.kv_head_begin = pos.kv_head_begin;
    return c;
  }
  static kernels::AttentionOffsets offsets(const AttentionPositions& pos) {
    return {pos.q_offset, pos.k_offset, pos.doc_start, pos.doc_end, pos.doc_stride};
  }
  kernels::LshConfig cfg_;
};

}  // namespace exa::model
