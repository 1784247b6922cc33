#pragma once
// CoreAttention: causal softmax attention on already projected, RoPE-rotated
// q, k, v (docs/architecture.md, "Seams"). The positions of the query and
// key rows are explicit so that context parallelism can replace it with ring
// attention, where a rank's queries meet key blocks from other ranks:
// query row i sits at position q_offset + i, key row j at k_offset + j, and
// i attends to j when q_offset + i >= k_offset + j.
//
//   q [B,T,Hl,hd]   k, v [B,Tk,Hkvl,hd]   out [B,T,Hl,hd]   lse [B,Hl,T]
//
// Head counts are this rank's (tensor parallelism splits heads). A query
// row that sees no key of the block gets out 0 and lse -inf (neutral in a
// log-sum-exp merge) and zero dq. backward reads out and lse as given: ring
// attention passes the values merged over all key blocks, and then the dq of
// the blocks sum to the full dq and each block's dk, dv are its keys' full
// gradients.
#include <cstdint>
#include <vector>

#include "core/types.hpp"

namespace exa::model {

// The documents of packed sequences ride along (kernels::AttentionOffsets:
// start and end positions of each position's document, [B, whole T]
// row-major with row stride doc_stride; null: none). Every implementation
// masks by them.
struct AttentionPositions {
  index_t q_offset = 0;
  index_t k_offset = 0;
  const std::int32_t* doc_start = nullptr;
  const std::int32_t* doc_end = nullptr;
  index_t doc_stride = 0;
  // Which heads of which layer call: LSH attention keys its hash rotations
  // by them (the others ignore them).
  std::int64_t layer = 0;
  std::int64_t kv_head_begin = 0;  // global index of this rank's kv head 0
};

// A run of this rank's rows of each sequence at consecutive positions: rows
// [row, row + len) sit at positions [pos, pos + len).
struct TokenChunk {
  index_t row = 0, len = 0, pos = 0;
};

template <class T, class D = Device>
class CoreAttention {
 public:
  using A4 = Kokkos::View<T****, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Lse = Kokkos::View<T***, Layout, D>;

  virtual ~CoreAttention() = default;
  // Where this rank's `rows` rows of each sequence sit in the sequence (RoPE
  // rotates each chunk by its own positions): one chunk at 0 when the rank
  // holds whole sequences; context parallelism's zigzag split has two.
  virtual std::vector<TokenChunk> token_chunks(index_t rows) const { return {TokenChunk{0, rows, 0}}; }
  // out and lse (log-sum-exp of each query row's scores) are overwritten.
  virtual void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
                       AttentionPositions pos) const = 0;
  // Gradients of sum(out * dout): dq, dk, dv are overwritten.
  virtual void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
                        const A4& dq, const A4& dk, const A4& dv, AttentionPositions pos) const = 0;
};

}  // namespace exa::model
