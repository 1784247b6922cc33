#pragma once
// EmbeddingLookup: how token ids become rows of the embedding table and how
// the rows' gradients go back into it (docs/architecture.md, "Seams"). The
// table is this rank's piece [V_local, d]; the ids are global. The local
// version gathers from the whole table; the vocabulary-parallel one looks up
// the ids of its own vocabulary range and sums the pieces across
// tensor-parallel ranks.
#include <cstdint>

#include "core/types.hpp"
#include "model/seams/linear.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class EmbeddingLookup {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using Ids = Kokkos::View<std::int32_t*, Layout, D>;
  using W2 = typename LayerWeights<T, D>::W2;
  using Adapter = LoraAdapter<T, D>;

  virtual ~EmbeddingLookup() = default;
  // out[n, :] = row tokens[n] of the table (overwrites out [N,d]), plus
  // the adapter's s B[tokens[n], :] A when there is one (LoRA on the table
  // W [V, d] as on any matrix: W + s B A with A [r, d], B [V, r]).
  virtual void forward(const Ids& tokens, const W2& table, const V2& out, const Adapter& ad = {}) const = 0;
  // dtable += scatter of dout [N,d] by token (the rows this rank holds;
  // skipped for a frozen table), and the adapter's dA += s B[tok]^T dout,
  // dB[tok] += s dout A^T.
  virtual void backward(const Ids& tokens, const V2& dout, const W2& dtable, const Adapter& ad = {}) const = 0;
};

}  // namespace exa::model
