#pragma once
// The token embedding [V,d] (parameter embed.weight): rows of this rank's
// vocabulary range (all of it on one rank), looked up through the
// EmbeddingLookup seam.
#include <cstdint>
#include <memory>

#include "core/error.hpp"
#include "core/types.hpp"
#include "model/seams/embedding_lookup.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class Embedding {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using Ids = Kokkos::View<std::int32_t*, Layout, D>;
  using W2 = typename LayerWeights<T, D>::W2;

  Embedding(std::int64_t vocab_begin, std::int64_t vocab_end, std::int64_t vocab_size,
            std::shared_ptr<const EmbeddingLookup<T, D>> lookup)
      : vocab_begin_(vocab_begin), vocab_end_(vocab_end), vocab_size_(vocab_size), lookup_(std::move(lookup)) {
    EXA_REQUIRE(0 <= vocab_begin && vocab_begin < vocab_end && vocab_end <= vocab_size && lookup_,
                "Embedding: rows [{}, {}) are not a non-empty range of a {}-token vocabulary (or no lookup seam)",
                vocab_begin, vocab_end, vocab_size);
  }
  static const char* param_name() { return "embed.weight"; }
  std::int64_t vocab_size() const { return vocab_size_; }

  using Adapter = typename EmbeddingLookup<T, D>::Adapter;

  void forward(const Ids& tokens, const W2& table, const V2& out, const Adapter& ad = {}) const {
    lookup_->forward(tokens, table, out, ad);
  }
  // dtable += scatter of dout by token. A frozen table (LoRA) has no
  // gradient: nothing to scatter unless it has an adapter.
  void backward(const Ids& tokens, const V2& dout, const W2& dtable, const Adapter& ad = {}) const {
    if (dtable.data() != nullptr || ad) lookup_->backward(tokens, dout, dtable, ad);
  }

 private:
  std::int64_t vocab_begin_, vocab_end_, vocab_size_;
  std::shared_ptr<const EmbeddingLookup<T, D>> lookup_;
};

}  // namespace exa::model
