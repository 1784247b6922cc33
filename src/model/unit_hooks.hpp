#pragma once
// UnitHooks: the points in a forward or backward pass where one unit's
// parameters start or stop being used, for the data-parallel layer to gather
// sharded parameters just in time (ZeRO-3 / FSDP) and to launch gradient
// reductions as soon as a unit's gradients are final (bucketed overlap).
//
// Units, in parameter-spec order (parameter_specs.hpp):
//   unit 0        the token embedding
//   unit 1 + l    transformer layer l (its norms, attention and FFN/MoE)
//   unit L + 1    the head: the final norm and, untied, the LM head
// With tie_embeddings the head also reads (and its backward accumulates into)
// the embedding, which belongs to unit 0.
//
// Forward order is 0, 1, ..., L+1; backward order is L+1, L, ..., 0. A hook
// may rebind nothing: the weights it prepares are the ones already bound in
// the Weights the caller passed (fixed buffers), it only fills or drains them.
#include <cstdint>
#include <string>
#include <vector>

namespace exa::model {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before the first read of unit u's weights in a forward pass (training,
  // evaluation or generation).
  virtual void before_forward(int /*unit*/) {}
  // In a MoE layer's forward, once its routing has chosen which of this
  // rank's routed experts get rows (`used`, marked so far: the expert
  // all-to-all in parts calls it once per part) and before its expert
  // products read their weights.
  virtual void experts_routed(int /*unit*/, const std::vector<std::uint8_t>& /*used*/) {}
  // After a transformer layer's forward (units 1..L), with which of this
  // rank's routed experts had rows in it (empty for a dense layer).
  virtual void after_forward(int /*unit*/, const std::vector<std::uint8_t>& /*experts_used*/) {}
  // Before backward reads unit u's weights or accumulates into its gradients.
  virtual void before_backward(int /*unit*/) {}
  // Before a segment's recomputation (memory.checkpoint_layers) runs unit
  // u's forward again, ahead of that unit's own backward: its weights must
  // be in place then too.
  virtual void before_recompute(int /*unit*/) {}
  // After the backward pass has accumulated unit u's last gradient
  // contribution of this micro-batch.
  virtual void after_backward(int /*unit*/) {}
};

// A shared instance that does nothing (the default).
UnitHooks& no_unit_hooks();

// Several hooks side by side (data parallelism, later pipeline and expert
// parallelism): each event goes to every member, in the order they were
// added. Members are not owned.
class UnitHookList final : public UnitHooks {
 public:
  void add(UnitHooks* h) {
    if (h != nullptr) hooks_.push_back(h);
  }
  void clear() { hooks_.clear(); }
  std::size_t size() const { return hooks_.size(); }

  void before_forward(int unit) override {
    for (auto* h : hooks_) h->before_forward(unit);
  }
  void experts_routed(int unit, const std::vector<std::uint8_t>& used) override {
    for (auto* h : hooks_) h->experts_routed(unit, used);
  }
  void after_forward(int unit, const std::vector<std::uint8_t>& used) override {
    for (auto* h : hooks_) h->after_forward(unit, used);
  }
  void before_backward(int unit) override {
    for (auto* h : hooks_) h->before_backward(unit);
  }
  void before_recompute(int unit) override {
    for (auto* h : hooks_) h->before_recompute(unit);
  }
  void after_backward(int unit) override {
    for (auto* h : hooks_) h->after_backward(unit);
  }

 private:
  std::vector<UnitHooks*> hooks_;
};

// Unit of a parameter by its global name; n_layers = L.
int unit_of(const std::string& param_name, std::int64_t n_layers);
inline int n_units(std::int64_t n_layers) { return static_cast<int>(n_layers) + 2; }

}  // namespace exa::model
