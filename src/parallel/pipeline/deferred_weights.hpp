#pragma once
// The zero-bubble schedule's split backward (docs/architecture.md,
// "Pipeline parallelism"; ZB-H1 of Qi et al., 2023): B, the input
// gradient, stays on the critical path; W, the weight gradient, waits.
//
// DeferredLinear wraps a stage's Linear seams (the column/row-parallel
// ones under tensor parallelism). While its queue is deferring (the
// pipeline opens it around a micro-batch's backward), backward_weight
// records its product instead of running it: the input x and output
// gradient dy are copied (dy lives in scratch the next layer overwrites)
// next to the gradient they accumulate into; consecutive products of one
// input through one seam (wq, wk, wv; w1, w3) share its copy. Under sequence parallelism the
// copies are of the operands gathered over the Tp group during B
// (Linear::weight_operands), so that W, which each rank runs when it would
// wait, enters no collective. The pipeline runs a micro-batch's recorded
// products, its W, when the stage would otherwise wait for a receive, and
// all of them before the step's last backward, which runs undeferred so
// that the data-parallel reduction hooks see complete gradients. The
// routed experts' and the LM head's weight gradients are not Linear seams
// here and stay in B.
//
// Under bf16 products (precision.compute = "bf16") the copies are bf16:
// every product rounds its inputs to bf16, so W computes from them exactly
// what it would from fp32 copies, in half the memory. LoRA's dropout
// scales the adapter's input before it is rounded, so an adapter with
// dropout keeps fp32 copies.
//
// Under ZeRO 2/3 a unit's gradient buffer is reused before W runs: the
// queue then has a GradientHome (gradient_home.hpp), records where each
// product's gradient lives, writes W's into buffers the home gives it,
// and W runs at fixed points of the schedule (fixed_order()).
#include <array>
#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "core/bf16.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/seams.hpp"
#include "parallel/pipeline/gradient_home.hpp"

namespace exa::parallel::pipeline {

class WeightGradQueue {
 public:
  using L = model::Linear<float, Device>;
  using Act = L::Act;
  using Wt = L::Wt;

  // Starts recording micro-batch `micro`'s weight gradients / stops.
  void open(int micro);
  void close() { deferring_ = false; }
  bool deferring() const { return deferring_; }
  // The buffers W writes into when the recorded ones are reused (null:
  // none; every gradient buffer outlives its W). Set while nothing is
  // pending.
  void set_home(GradientHome* home);
  GradientHome* home() const { return home_; }
  // W's reductions are collectives: it must run at the same points on
  // every data-parallel replica of a stage, not where a wait happens to be.
  bool fixed_order() const { return home_ != nullptr; }
  // `seam`: the wrapper recording it; only consecutive products of one seam
  // share an input copy.
  void push(const void* seam, const L& inner, const Act& x, const Act& dy, const Wt& dw, bool accumulate,
            const L::Adapter& ad);

  bool empty() const { return batches_.empty(); }
  std::size_t pending() const { return batches_.size(); }  // micro-batches whose W is outstanding
  void run_oldest();  // one micro-batch's W
  void run_all();
  std::size_t bytes() const;  // the copies held, and the fp32 scratch bf16 copies are widened into

 private:
  // An operand's copy: fp32, or bf16 (`half`) when the product rounds it
  // to bf16 anyway.
  struct Copy {
    Act f32;
    Kokkos::View<bf16**, Layout, Device> half;
    bool is_half = false;
    const void* data() const { return is_half ? static_cast<const void*>(half.data()) : f32.data(); }
    std::size_t bytes() const { return f32.span() * sizeof(float) + half.span() * sizeof(bf16); }
  };
  static Copy copy_of(const Act& v, bool half, const char* label);
  // `c` as fp32: itself, or widened into `buf` (grown as needed).
  static Act widened(const Copy& c, Kokkos::View<float*, Layout, Device>& buf);
  struct Entry {
    const L* inner;
    Copy x, dy;
    Wt dw;
    bool accumulate;
    // The adapter's values and gradients: working copies that outlive the
    // W, or, with a home, copies of the values (ZeRO 3 gathers them into
    // reused buffers) and the gradients' places.
    L::Adapter ad;
    GradientHome::Place dw_at, da_at, db_at;
    std::array<Act, 2> kept;  // the adapter's A and B values, with a home
  };
  struct Batch {
    int micro = 0;
    std::vector<Entry> entries;
    std::vector<Copy> inputs;       // the input copies
    const float* last = nullptr;    // the data the last entry's x copies, its shape and seam
    std::size_t last_rows = 0, last_cols = 0;
    const void* last_seam = nullptr;
  };
  void run(const Batch& b);
  std::deque<Batch> batches_;
  Kokkos::View<float*, Layout, Device> x_buf_, dy_buf_;  // W's fp32 operands of bf16 copies
  bool deferring_ = false;
  GradientHome* home_ = nullptr;
};

class DeferredLinear final : public model::Linear<float, Device> {
 public:
  DeferredLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<WeightGradQueue> queue)
      : inner_(std::move(inner)), queue_(std::move(queue)) {}
  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
               const Adapter& ad = {}) const override {
    inner_->forward(x, w, y, accumulate, ad);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                      const Adapter& ad = {}) const override {
    inner_->backward_input(dy, w, dx, accumulate, ad);
  }
  std::pair<Act, Act> weight_operands(const Act& x, const Act& dy) const override {
    return inner_->weight_operands(x, dy);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                       const Adapter& ad = {}) const override {
    if (dw.data() == nullptr && !ad) return;  // frozen, no adapter: nothing to defer
    if (queue_->deferring()) queue_->push(this, *inner_, x, dy, dw, accumulate, ad);
    else inner_->backward_weight(x, dy, dw, accumulate, ad);
  }
  // Undeferred, the inner seam's own backward (a tensor-parallel column
  // linear overlaps its weight gradient with the input gradient's reduction).
  void backward(const Act& x, const Wt& w, const Act& dy, const Act& dx, const Wt& dw,
                bool accumulate_dx = false, const Adapter& ad = {}) const override {
    if (queue_->deferring()) Linear::backward(x, w, dy, dx, dw, accumulate_dx, ad);
    else inner_->backward(x, w, dy, dx, dw, accumulate_dx, ad);
  }

 private:
  std::shared_ptr<const Linear> inner_;
  std::shared_ptr<WeightGradQueue> queue_;
};

// The zero-bubble schedule: wraps the column, row and replicated Linear
// seams so that their weight gradients go into `queue` while it defers.
// Called after the tensor-parallel seams are in, so that theirs are the
// ones deferred. A no-op when `queue` is null.
void use_deferred_weights(model::Seams<float>& seams, const std::shared_ptr<WeightGradQueue>& queue);

}  // namespace exa::parallel::pipeline
