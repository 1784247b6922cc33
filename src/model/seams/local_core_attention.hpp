#pragma once
// The single-rank CoreAttention: the tiled kernels of kernels/attention.hpp,
// which mask by the explicit positions, so any query and key offsets (and any
// key block length) are handled here; ring attention calls the same kernels
// per key block.
#include "kernels/attention.hpp"
#include "model/seams/core_attention.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalCoreAttention final : public CoreAttention<T, D> {
 public:
  using typename CoreAttention<T, D>::A4;
  using typename CoreAttention<T, D>::Lse;

  explicit LocalCoreAttention(kernels::AttentionTiles tiles = {}) : tiles_(tiles) {}

  void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
               AttentionPositions pos) const override {
    kernels::attention_forward(q, k, v, out, lse, tiles_, offsets(pos));
  }
  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, AttentionPositions pos) const override {
    kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, tiles_, offsets(pos));
  }

 private:
  static kernels::AttentionOffsets offsets(AttentionPositions pos) {
    return {pos.q_offset, pos.k_offset, pos.doc_start, pos.doc_end, pos.doc_stride};
  }
  kernels::AttentionTiles tiles_;
};

}  // namespace exa::model
