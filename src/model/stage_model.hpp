#pragma once
// StageModel: the layers [l0, l1) of the ExaMoE transformer that one
// pipeline stage holds, plus the embedding when l0 = 0 and the final norm,
// LM head and loss when l1 = L (docs/architecture.md, "The model as layers").
// The whole model on one rank is the stage [0, L).
//
//   tokens [B,T] -> embed -> L x { x += Attn(RMSNorm(x)); x += FFN(RMSNorm(x)) }
//          -> RMSNorm -> LM head -> mean cross-entropy over the valid targets
//   loss = ce + sum over MoE layers of (aux + z)   (coefficients included)
//
// Its parts are layer objects (layers/), each owning its parameter names,
// built from a StagePlan (local heads, columns, experts, vocabulary) and a
// Seams set (the Linear, CoreAttention, TokenDispatcher and LossHead
// implementations); parallel::build_model is the one place that picks them.
//
// Micro-batches: forward fills an activation context from the model's pool
// and returns it; backward consumes it and gives it back. Several contexts
// may be alive at once (pipeline schedules); one pass runs at a time.
//
//   auto& c1 = model.forward(w, {inputs1, targets1});
//   auto& c2 = model.forward(w, {inputs2, targets2});
//   model.backward(c2, w, g, 0.5);   // g += 0.5 d(loss_2)/d(params)
//   model.backward(c1, w, g, 0.5);
//
// Loss scaling: a forward's loss is its micro-batch MEAN (ce over its valid
// targets, aux and z per MoE layer as the router defines them); backward
// ACCUMULATES (+=) loss_scale * d(loss)/d(param) into `grads`. A stage
// without the head takes d(loss)/d(its output) instead (d_out, already
// scaled), a stage without the embedding returns d(loss)/d(its input) in
// d_in.
//
// Unit hooks (unit_hooks.hpp) run at unit boundaries, every attached list
// member in order. Templated on the scalar T (float for training, double for
// the finite-difference tests) and the Kokkos device D; stage_model.cpp
// instantiates <float, Device> and <double, Device>. Phases carry
// exa::ScopedRegion names: forward/embed, forward/attn, forward/ffn,
// forward/moe (/router, /experts, /shared), forward/head, and the same under
// backward/.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/rope.hpp"
#include "model/activation_context.hpp"
#include "model/forward_result.hpp"
#include "model/layers/embedding.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/scratch.hpp"
#include "model/layers/transformer_layer.hpp"
#include "model/model_config.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/seams/seams.hpp"
#include "model/stage_plan.hpp"
#include "model/unit_hooks.hpp"
#include "model/weights.hpp"

namespace exa::model {

// memory.recompute. none: each layer's forward keeps everything its
// backward reads (a LayerContext per layer and micro-batch in flight).
// full: a context keeps only each layer's input; the layers run forward in
// one work context per layer kind, and backward runs each layer's forward
// again, from that input, right before its backward: the same arithmetic,
// so the same gradients bit for bit, for one more forward of compute.
// selective: as none, but what is cheap to compute again and large to keep
// (both RMSNorm outputs, the SwiGLU products of the dense, routed and shared
// experts) lives in buffers all contexts share, and backward computes it
// again right before reading it (LayerContext::shared_cheap). Attention
// keeps no scores or probabilities in any mode (the kernels recompute them
// from q, k, v and the log-sum-exp), and routing is never recomputed.
enum class Recompute { none, selective, full };

// ModelOptions::checkpoint_layers for memory.checkpoint_layers = "sqrt".
constexpr std::int64_t kSqrtLayers = -1;

struct ModelOptions {
  bool fence_phases = false;  // fence at the end of each phase so the timers charge device work correctly
  kernels::AttentionTiles attention_tiles{};
  Recompute recompute = Recompute::none;
  // Under full recompute: a context keeps the input of every N-th layer of
  // a chunk only (segments of N layers, Chen et al. 2016); 1 keeps every
  // layer's, kSqrtLayers takes N = ceil(sqrt(layers of the chunk)). A
  // segment's other inputs are recomputed from its first in backward, into
  // N - 1 buffers the model shares between contexts: O(L/N + N) inputs.
  std::int64_t checkpoint_layers = 1;

  // memory.recompute and memory.checkpoint_layers of a deck; the rest at
  // their defaults.
  static ModelOptions from_deck(const deck::Config& cfg);
};

template <class T, class D = Device>
class StageModel {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using Tokens = Kokkos::View<const std::int32_t**, Layout, D>;  // [B,T], contiguous
  using W = Weights<T, D>;
  using Context = StageContext<T, D>;

  // A micro-batch entering the stage: tokens on the first stage, the
  // previous stage's output (with its shape) elsewhere; targets on the last.
  struct Input {
    Tokens tokens;
    Tokens targets;
    V2 hidden;              // [N,d]
    MicroBatchShape shape;  // needed with `hidden` only
    // Interleaved pipeline: which of the plan's chunks runs (the embedding
    // belongs to chunk 0 of the first stage, the head to the last chunk of
    // the last stage). A plan without chunks has only chunk 0.
    int chunk = 0;
    // Distillation, read by the stage that holds the head
    // (docs/architecture.md "Distillation"). A teacher's forward or eval
    // writes its soft targets, softmax(logits / temperature), into
    // *soft_out (resized to the micro-batch); a student's forward adds
    // distill_coef * temperature^2 * KL(soft_in || softmax(logits /
    // temperature)), a mean over the valid targets like the
    // cross-entropy's, to its loss and its backward.
    SoftTargets<T, D>* soft_out = nullptr;
    SoftTargets<T, D> soft_in;
    double temperature = 1, distill_coef = 0;
    // Packed sequences: the documents of the whole sequences, which every
    // stage reads (masks, RoPE positions). Empty: none.
    DocumentSpans<D> documents;
    // The cross-entropy's denominator, read by the stage that holds the
    // head: 0 takes this micro-batch's valid targets (the mean over them).
    // Packing and token budgets give each micro-batch (and each context-
    // parallel rank) its own count of valid targets; the trainer passes
    // the step's global count divided by the number of micro-batch shares
    // that are averaged, so that the step's loss is the mean over all its
    // valid targets, whatever the layout.
    double ce_denominator = 0;
    // The micro-batch's task (its data stream's; docs/data.md "Data
    // streams"), reported back in ForwardResult::task.
    int task = 0;
  };

  // The single-rank model: the whole stage with the local seams.
  explicit StageModel(const ModelConfig& cfg, ModelOptions opt = {});
  StageModel(const ModelConfig& cfg, const StagePlan& plan, Seams<T, D> seams, ModelOptions opt = {});
  virtual ~StageModel() = default;
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const StagePlan& plan() const { return plan_; }
  const std::vector<TransformerLayer<T, D>>& layers() const { return layers_; }
  // Every parameter this stage reads, by global name, in spec order.
  std::vector<std::string> param_names() const;

  // Aux-loss-free balancing: the per-expert bias MoE layer `layer` (global
  // index, one of this stage's) adds to its routing scores for the top-k
  // selection only; n_experts values, or none to remove it. Takes effect at
  // the next forward.
  void set_router_bias(std::int64_t layer, const std::vector<float>& bias);
  // Expert growth's clone families for MoE layer `layer` (kernels/router.hpp,
  // `ring`); empty to remove them.
  void set_clone_ring(std::int64_t layer, const std::vector<int>& ring);

  // LoRA's dropout (lora.dropout): the masks of the forwards from now on
  // are keyed by `key` and the forward's number since this call. The
  // trainer sets one key per step and data-parallel rank, so a resumed run
  // draws the masks of the uninterrupted one.
  void set_dropout_key(std::uint64_t key) {
    dropout_key_ = key;
    forwards_ = 0;
  }

  // Attaches hooks (not owned) after those already attached.
  void add_hooks(UnitHooks* hooks) { hooks_.add(hooks); }
  void clear_hooks() { hooks_.clear(); }

  // Runs the micro-batch; the returned context (owned by the model) holds
  // its activations and result until backward() consumes it.
  Context& forward(const W& w, const Input& in);
  // grads += loss_scale * d(loss of ctx's forward)/d(weights); see above for
  // d_out / d_in on inner stages. ctx goes back to the pool.
  void backward(Context& ctx, const W& w, const W& grads, double loss_scale = 1.0, const V2& d_out = {},
                const V2& d_in = {});
  // Gives a context back without a backward (a forward whose gradient is
  // not wanted).
  void release(Context& ctx);

  // Evaluation (whole model): per-token cross-entropy (nats) into ce [B*T]
  // (0 where the target is ignored), no aux/z. Returns the sum and the count
  // of valid targets. Routing (and capacity) as in forward. Live contexts
  // are not disturbed. With Input::soft_out (a distillation teacher) it
  // writes the soft targets and no cross-entropy (loss_sum 0).
  kernels::CrossEntropySum eval(const W& w, const Tokens& inputs, const Tokens& targets, const V1& ce);
  // The same on the stage that holds the head (evaluation through a
  // pipeline): `in` as forward() takes it, tokens on a stage that holds the
  // embedding too, else the previous stage's output.
  kernels::CrossEntropySum eval(const W& w, const Input& in, const Tokens& targets, const V1& ce);
  // Generation (whole model): logits [B,V] of position pos (default T-1) of
  // each sequence. Causal, so later tokens do not influence them (with
  // capacity_factor > 0 they can, through expert capacity).
  void next_logits(const W& w, const Tokens& inputs, const V2& out, std::int64_t pos = -1);
  // The same on the stage that holds the head (generation through a
  // pipeline): `in` as forward() takes it, without targets (tokens when the
  // stage holds the embedding too, else the previous stage's output).
  void next_logits(const W& w, const Input& in, const V2& out, std::int64_t pos = -1);

  int n_chunks() const { return static_cast<int>(chunk_first_.size()) - 1; }
  bool chunk_has_embedding(int chunk) const { return embedding_ && chunk == 0; }
  bool chunk_has_head(int chunk) const { return final_norm_ && chunk == n_chunks() - 1; }

  int live_contexts() const;
  // Bytes of activations held by every context of the pool (for the memory
  // report: with the sequential schedule, one micro-batch's).
  std::size_t activation_bytes() const;

 private:
  // MoE layer `layer`'s block; exa::Error naming `what` when the layer is
  // dense or not on this stage.
  MoeBlock<T, D>& router_of(std::int64_t layer, const char* what);
  using Ids = Kokkos::View<const std::int32_t*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Context& acquire(MicroBatchShape shape, int chunk = 0);
  void allocate(Context& c, MicroBatchShape shape, int chunk) const;
  // Every buffer of one layer's context but x (the block input).
  void allocate_layer(LayerContext<T, D>& lc, bool moe, MicroBatchShape shape) const;
  // Where layer `layer` runs: its own context, or under full recompute the
  // work context of its kind, with x pointing at the context's input.
  LayerContext<T, D>& layer_context(Context& c, std::size_t i, const TransformerLayer<T, D>& layer);
  // Segments of full recompute: layers per segment of `chunk`, and where
  // layer i of a context keeps its input (its own x, or a segment buffer).
  std::int64_t segment_layers(int chunk) const;
  V2 layer_input(Context& c, std::size_t i) const;
  void ensure_scratch(MicroBatchShape shape);
  Ids flat(const Tokens& t, const char* what) const;
  // Embedding (or the incoming hidden state) and the layers into c.out.
  kernels::RouterLosses run_layers(Context& c, const W& w, const Input& in, std::vector<LayerRouting>* routing);
  void load_targets(Context& c, const Tokens& targets) const;
  void load_documents(Context& c, const DocumentSpans<D>& docs) const;
  // The head's distillation parts of `in` (see Input): the teacher's soft
  // targets out, or the student's term into c.result.
  void write_soft_targets(const Context& c, const Input& in) const;
  void add_distillation(Context& c, const Input& in) const;
  void check_weights(const W& w, const char* what) const;
  // The LM head's adapter: a tied head reads the embedding's (LoRA).
  LoraAdapter<T, D> head_adapter(const W& w, const W* g = nullptr) const {
    if (!cfg_.tie_embeddings) return {};
    return lora::adapter<T, D>(w.lora_embed, w.lora_scale, g ? &g->lora_embed : nullptr);
  }
  int head_unit() const { return static_cast<int>(cfg_.n_layers) + 1; }

  ModelConfig cfg_;
  StagePlan plan_;
  Seams<T, D> seams_;
  ModelOptions opt_;
  std::optional<Embedding<T, D>> embedding_;
  std::vector<TransformerLayer<T, D>> layers_;
  std::vector<std::size_t> chunk_first_;  // chunk c: layers_[chunk_first_[c], chunk_first_[c+1])
  std::optional<RMSNorm<T, D>> final_norm_;
  UnitHookList hooks_;
  std::vector<std::unique_ptr<Context>> pool_;
  kernels::RopeTable<T, D> rope_;
  MicroBatchShape scratch_shape_;
  LayerScratch<T, D> scratch_;
  // Full recompute: the work contexts (MoE and dense layers) and the
  // recomputed forward's output, which backward does not need.
  LayerContext<T, D> work_moe_, work_dense_;
  V2 recompute_out_;
  std::vector<V2> segment_x_;  // [N-1] inputs of a segment's later layers
  // Selective recompute: the buffers every context shares (for the shape of
  // the last contexts allocated; older contexts keep theirs alive).
  struct SharedCheap {
    MicroBatchShape shape;
    bool experts_bf16 = false;
    V2 xn, h, eh;
    typename LayerContext<T, D>::H2 eh16;
    typename LayerContext<T, D>::V3 sh;
    std::size_t bytes() const {
      return (xn.span() + h.span() + eh.span() + sh.span()) * sizeof(T) + eh16.span() * sizeof(bf16);
    }
  };
  mutable SharedCheap cheap_;
  std::uint64_t dropout_key_ = 1, forwards_ = 0;  // set_dropout_key
};

extern template class StageModel<float, Device>;
extern template class StageModel<double, Device>;

}  // namespace exa::model
