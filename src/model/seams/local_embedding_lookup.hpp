#pragma once
// The single-rank EmbeddingLookup: the whole table, the gather and the
// deterministic scatter-add of kernels/embedding.hpp.
#include "core/error.hpp"
#include "kernels/embedding.hpp"
#include "model/seams/embedding_lookup.hpp"
#include "model/seams/lora_ops.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalEmbeddingLookup final : public EmbeddingLookup<T, D> {
 public:
  using typename EmbeddingLookup<T, D>::V2;
  using typename EmbeddingLookup<T, D>::Ids;
  using typename EmbeddingLookup<T, D>::W2;

  explicit LocalEmbeddingLookup(std::int64_t vocab_size) : vocab_(vocab_size) {}

  using typename EmbeddingLookup<T, D>::Adapter;

  void forward(const Ids& tokens, const W2& table, const V2& out, const Adapter& ad = {}) const override {
    check(table);
    kernels::embedding_forward(table, tokens, out);
    if (ad) lora::table_forward(rows_of_b(tokens, ad), ad, out);
  }
  void backward(const Ids& tokens, const V2& dout, const W2& dtable, const Adapter& ad = {}) const override {
    if (dtable.data() != nullptr) {
      check(dtable);
      kernels::embedding_backward(tokens, dout, dtable, /*accumulate=*/true);
    }
    if (!ad) return;
    const auto g = lora::table_backward(rows_of_b(tokens, ad), dout, ad, lora_);
    kernels::embedding_backward(tokens, g, ad.db, /*accumulate=*/true);
  }

 private:
  void check(const W2& table) const {
    EXA_REQUIRE(std::int64_t(table.extent(0)) == vocab_,
                "LocalEmbeddingLookup: the table has {} rows of a {}-token vocabulary; the local lookup needs all "
                "of them (a vocabulary-parallel model is built by parallel::build_model)",
                table.extent(0), vocab_);
  }
  // B's rows of the tokens [N, r].
  typename Linear<T, D>::Act rows_of_b(const Ids& tokens, const Adapter& ad) const {
    const auto hb = lora::scratch(lora_.h, tokens.extent(0), ad.b.extent(1));
    kernels::embedding_forward(ad.b, tokens, hb);
    return hb;
  }
  std::int64_t vocab_;
  mutable lora::Scratch<T, D> lora_;  // the adapter's products
};

}  // namespace exa::model
