#pragma once
// Transformer<T, D>: the whole model on one rank (the stage [0, L) with the
// local seams) with one implicit activation context, for the callers that
// run one micro-batch at a time: evaluation, generation, the reference dumps
// and the model tests.
//
//   Transformer<float> model(cfg);
//   auto w = bind_values(cfg, store), g = bind_grads(cfg, store);
//   store.zero_grads();
//   for (micro-batch m of M) {
//     ForwardResult r = model.forward(w, inputs_m, targets_m);
//     model.backward(w, g, 1.0 / M);      // g += (1/M) d(loss_m)/d(params)
//   }
//
// backward() consumes the context of the immediately preceding forward();
// StageModel's explicit-context API (stage_model.hpp) is there too for
// several micro-batches in flight.
#include "model/stage_model.hpp"

namespace exa::model {

template <class T, class D = Device>
class Transformer : public StageModel<T, D> {
 public:
  using Base = StageModel<T, D>;
  using typename Base::Tokens;
  using typename Base::V2;
  using typename Base::W;
  using Base::backward;
  using Base::forward;

  explicit Transformer(const ModelConfig& cfg, ModelOptions opt = {}) : Base(cfg, opt) {}
  // One pipeline stage of it (plan: StagePlan::layers), with the local
  // seams: generation and evaluation through a pipeline of ranks.
  Transformer(const ModelConfig& cfg, const StagePlan& plan, ModelOptions opt = {})
      : Base(cfg, plan, Seams<T, D>::local(plan, opt.attention_tiles, cfg.attention), opt) {}

  // Loss of the micro-batch inputs [B,T] -> targets [B,T] (target < 0:
  // ignored). Keeps the activations for backward(). B and T may change from
  // call to call; T need not equal cfg.seq_len.
  ForwardResult forward(const W& w, const Tokens& inputs, const Tokens& targets) {
    typename Base::Input in;
    in.tokens = inputs;
    in.targets = targets;
    return forward_input(w, in);
  }

  // The same from a whole Input (distillation's soft targets), keeping the
  // activations for backward() too.
  ForwardResult forward_input(const W& w, const typename Base::Input& in) {
    drop();
    current_ = &Base::forward(w, in);
    return current_->result;
  }

  // grads += loss_scale * d(loss of the last forward)/d(weights).
  void backward(const W& w, const W& grads, double loss_scale = 1.0) {
    EXA_REQUIRE(current_ != nullptr, "Transformer::backward needs the activations of a preceding forward() "
                "(eval() and next_logits() do not keep them, and backward() consumes them)");
    auto* c = current_;
    current_ = nullptr;
    Base::backward(*c, w, grads, loss_scale);
  }

  // As StageModel's, but they end the implicit context as the old
  // one-context model did: a backward() after them is an error.
  kernels::CrossEntropySum eval(const W& w, const Tokens& inputs, const Tokens& targets, const typename Base::V1& ce) {
    drop();
    return Base::eval(w, inputs, targets, ce);
  }
  kernels::CrossEntropySum eval(const W& w, const typename Base::Input& in, const Tokens& targets,
                                const typename Base::V1& ce) {
    drop();
    return Base::eval(w, in, targets, ce);
  }
  void next_logits(const W& w, const Tokens& inputs, const V2& out, std::int64_t pos = -1) {
    drop();
    Base::next_logits(w, inputs, out, pos);
  }
  void next_logits(const W& w, const typename Base::Input& in, const V2& out, std::int64_t pos = -1) {
    drop();
    Base::next_logits(w, in, out, pos);
  }

  // After forward(): the full logits [B*T,V] (row n = b*T + t). backward()
  // overwrites them with their gradient.
  V2 logits() const { return context().logits; }
  // After forward(): the activations of layer l.
  const LayerContext<T, D>& cache(std::int64_t l) const { return context().layers.at(static_cast<std::size_t>(l)); }
  // After forward(): the input of the final RMSNorm [N,d].
  V2 final_hidden() const { return context().out; }

 private:
  void drop() {
    if (current_) Base::release(*current_);
    current_ = nullptr;
  }
  const StageContext<T, D>& context() const {
    EXA_REQUIRE(current_ != nullptr, "Transformer: no forward() has run since the last backward()");
    return *current_;
  }
  StageContext<T, D>* current_ = nullptr;
};

}  // namespace exa::model
