#pragma once
// The two implementations of kernels/attention.hpp that the attention tests
// run side by side: the dispatch (the host gemm path on host backends, the
// team kernels on devices) and the team kernels themselves.
#include "kernels/attention.hpp"

namespace exa::test {

enum class AttentionPath { Dispatch, Team };
inline const char* path_name(AttentionPath p) { return p == AttentionPath::Dispatch ? "dispatch" : "team"; }

template <class Q, class K, class V, class O, class L>
void forward(AttentionPath p, const Q& q, const K& k, const V& v, const O& out, const L& lse,
             kernels::AttentionTiles tiles, kernels::AttentionOffsets pos) {
  if (p == AttentionPath::Dispatch)
    kernels::attention_forward(q, k, v, out, lse, tiles, pos);
  else
    kernels::attention_detail::forward_team(q, k, v, out, lse, tiles, pos);
}

template <class DO, class Q, class K, class V, class O, class L, class G, class GK>
void backward(AttentionPath p, const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse,
              const G& dq, const GK& dk, const GK& dv, kernels::AttentionTiles tiles, kernels::AttentionOffsets pos) {
  if (p == AttentionPath::Dispatch)
    kernels::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, tiles, pos);
  else
    kernels::attention_detail::backward_team(dout, q, k, v, out, lse, dq, dk, dv, tiles, pos);
}

}  // namespace exa::test
