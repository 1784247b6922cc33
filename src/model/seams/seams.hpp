#pragma once
// Seams<T, D>: the implementations a StageModel is built with, one per seam
// (docs/architecture.md, "Seams"). parallel::build_model is the one place
// that picks them for a layout; Seams::local() is the single-rank model.
#include <memory>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "model/seams/core_attention.hpp"
#include "model/seams/embedding_lookup.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/local_core_attention.hpp"
#include "model/seams/local_embedding_lookup.hpp"
#include "model/seams/local_linear.hpp"
#include "model/seams/local_loss_head.hpp"
#include "model/seams/local_token_dispatcher.hpp"
#include "model/seams/lsh_core_attention.hpp"
#include "model/seams/loss_head.hpp"
#include "model/seams/routing_scope.hpp"
#include "model/seams/token_dispatcher.hpp"
#include "model/model_config.hpp"
#include "model/stage_plan.hpp"

namespace exa::model {

// How a projection's weight is split across tensor-parallel ranks: column
// (output features: wq/wk/wv, w1/w3), row (input features: wo, w2) or not at
// all (the router).
enum class LinearKind { Column, Row, Replicated };

template <class T, class D = Device>
struct Seams {
  std::shared_ptr<const Linear<T, D>> column, row, replicated;
  std::shared_ptr<const CoreAttention<T, D>> attention;
  std::shared_ptr<TokenDispatcher<T, D>> dispatcher;  // shared by the stage's MoE layers
  std::shared_ptr<const LossHead<T, D>> loss_head;
  std::shared_ptr<const EmbeddingLookup<T, D>> embedding;
  RoutingScope routing;  // the MoE layers' aux-loss statistics: this rank's tokens unless set

  const std::shared_ptr<const Linear<T, D>>& linear(LinearKind k) const {
    return k == LinearKind::Column ? column : k == LinearKind::Row ? row : replicated;
  }

  static Seams local(const StagePlan& plan, kernels::AttentionTiles tiles = {}, const AttentionConfig& attn = {}) {
    Seams s;
    const auto lin = std::make_shared<const LocalLinear<T, D>>();
    s.column = s.row = s.replicated = lin;
    if (attn.lsh)
      s.attention = std::make_shared<const LshCoreAttention<T, D>>(
          kernels::LshConfig{attn.lsh_hashes, attn.lsh_bucket, attn.lsh_chunks, 0, 0, attn.lsh_local});
    else
      s.attention = std::make_shared<const LocalCoreAttention<T, D>>(tiles);
    EXA_REQUIRE(plan.expert_begin == 0, "Seams::local: this rank holds experts [{}, {}), the local dispatcher "
                "needs all of them", plan.expert_begin, plan.expert_end);
    s.dispatcher = std::make_shared<LocalTokenDispatcher<T, D>>(static_cast<int>(plan.expert_end));
    s.loss_head = std::make_shared<const LocalLossHead<T, D>>(lin);
    s.embedding = std::make_shared<const LocalEmbeddingLookup<T, D>>(plan.vocab_end - plan.vocab_begin);
    return s;
  }
};

}  // namespace exa::model
