#pragma once
// The token embedding [V,d] (parameter embed.weight): rows of this rank's
// vocabulary range (all of it on one rank).
#include <cstdint>

#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/embedding.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class Embedding {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using Ids = Kokkos::View<std::int32_t*, Layout, D>;
  using W2 = typename LayerWeights<T, D>::W2;

  Embedding(std::int64_t vocab_begin, std::int64_t vocab_end, std::int64_t vocab_size)
      : vocab_begin_(vocab_begin), vocab_end_(vocab_end), vocab_size_(vocab_size) {
    EXA_REQUIRE(vocab_begin == 0 && vocab_end == vocab_size,
                "Embedding: rows [{}, {}) of a {}-token vocabulary; the local embedding needs all of them",
                vocab_begin, vocab_end, vocab_size);
  }
  static const char* param_name() { return "embed.weight"; }
  std::int64_t vocab_size() const { return vocab_size_; }

  void forward(const Ids& tokens, const W2& table, const V2& out) const {
    kernels::embedding_forward(table, tokens, out);
  }
  // dtable += scatter of dout by token.
  void backward(const Ids& tokens, const V2& dout, const W2& dtable) const {
    kernels::embedding_backward(tokens, dout, dtable, /*accumulate=*/true);
  }

 private:
  std::int64_t vocab_begin_, vocab_end_, vocab_size_;
};

}  // namespace exa::model
