#pragma once
// EmbeddingLookup: how token ids become rows of the embedding table and how
// the rows' gradients go back into it (docs/architecture.md, "Seams"). The
// table is this rank's piece [V_local, d]; the ids are global. The local
// version gathers from the whole table; the vocabulary-parallel one looks up
// the ids of its own vocabulary range and sums the pieces across
// tensor-parallel ranks.
#include <cstdint>

#include "core/types.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class EmbeddingLookup {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using Ids = Kokkos::View<std::int32_t*, Layout, D>;
  using W2 = typename LayerWeights<T, D>::W2;

  virtual ~EmbeddingLookup() = default;
  // out[n, :] = row tokens[n] of the table (overwrites out [N,d]).
  virtual void forward(const Ids& tokens, const W2& table, const V2& out) const = 0;
  // dtable += scatter of dout [N,d] by token (the rows this rank holds).
  virtual void backward(const Ids& tokens, const V2& dout, const W2& dtable) const = 0;
};

}  // namespace exa::model
