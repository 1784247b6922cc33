#pragma once
// The single-rank EmbeddingLookup: the whole table, the gather and the
// deterministic scatter-add of kernels/embedding.hpp.
#include "core/error.hpp"
#include "kernels/embedding.hpp"
#include "model/seams/embedding_lookup.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalEmbeddingLookup final : public EmbeddingLookup<T, D> {
 public:
  using typename EmbeddingLookup<T, D>::V2;
  using typename EmbeddingLookup<T, D>::Ids;
  using typename EmbeddingLookup<T, D>::W2;

  explicit LocalEmbeddingLookup(std::int64_t vocab_size) : vocab_(vocab_size) {}

  void forward(const Ids& tokens, const W2& table, const V2& out) const override {
    check(table);
    kernels::embedding_forward(table, tokens, out);
  }
  void backward(const Ids& tokens, const V2& dout, const W2& dtable) const override {
    check(dtable);
    kernels::embedding_backward(tokens, dout, dtable, /*accumulate=*/true);
  }

 private:
  void check(const W2& table) const {
    EXA_REQUIRE(std::int64_t(table.extent(0)) == vocab_,
                "LocalEmbeddingLookup: the table has {} rows of a {}-token vocabulary; the local lookup needs all "
                "of them (a vocabulary-parallel model is built by parallel::build_model)",
                table.extent(0), vocab_);
  }
  std::int64_t vocab_;
};

}  // namespace exa::model
