#pragma once
// The single-rank CoreAttention: the tiled kernels of kernels/attention.hpp
// over the whole sequence.
#include "core/error.hpp"
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
    check(pos);
    kernels::attention_forward(q, k, v, out, lse, tiles_);
  }
  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, AttentionPositions pos) const override {
    check(pos);
    kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, tiles_);
  }

 private:
  // The kernels mask causally within one block of rows, which is every
  // case where queries and keys start at the same position.
  static void check(AttentionPositions pos) {
    EXA_REQUIRE(pos.q_offset == pos.k_offset,
                "LocalCoreAttention: query rows start at position {} and key rows at {}; the local kernels "
                "need both blocks to start at the same position (ring attention handles the rest)",
                pos.q_offset, pos.k_offset);
  }
  kernels::AttentionTiles tiles_;
};

}  // namespace exa::model
