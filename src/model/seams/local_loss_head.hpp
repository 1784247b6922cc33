#pragma once
// The single-rank LossHead: the LM head through a Linear and the fused
// softmax cross-entropy of kernels/cross_entropy.hpp on the whole
// vocabulary.
#include <memory>

#include "kernels/cross_entropy.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/loss_head.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalLossHead final : public LossHead<T, D> {
 public:
  using typename LossHead<T, D>::V1;
  using typename LossHead<T, D>::V2;
  using typename LossHead<T, D>::W2;
  using typename LossHead<T, D>::Adapter;

  explicit LocalLossHead(std::shared_ptr<const Linear<T, D>> proj) : proj_(std::move(proj)) {}

  kernels::CrossEntropySum forward(StageContext<T, D>& c, const W2& w, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
    return kernels::cross_entropy_forward_sum(c.logits, c.targets, c.ce_lse);
  }
  void backward(StageContext<T, D>& c, const W2& w, double loss_scale, const V2& dhf, const W2& dw,
                const Adapter& ad = {}) const override {
    if (c.distill.on())
      kernels::distill::ce_grad(c.logits, c.targets, c.ce_lse, c.distill.lse, c.distill.teacher.probs, c.distill.tau,
                                c.distill.coef, 0, loss_scale, c.n_valid);
    else
      kernels::cross_entropy_backward(c.logits, c.targets, c.ce_lse, loss_scale, c.n_valid, c.logits);
    proj_->backward(c.hf, w, c.logits, dhf, dw, false, ad);
  }
  void eval(StageContext<T, D>& c, const W2& w, const V1& ce, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
    kernels::cross_entropy_rows(c.logits, c.targets, c.ce_lse, ce);
  }
  void project(StageContext<T, D>& c, const W2& w, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
  }
  void soft_targets(const StageContext<T, D>& c, double tau, const SoftTargets<T, D>& out) const override {
    model::distill::soft_targets(c, tau, out, [](const auto&) {}, [](const auto&) {});
  }
  double distill(StageContext<T, D>& c) const override {
    return model::distill::kl(c, [](const auto&) {}, [](const auto&) {});
  }
  void logits(const V2& h, const W2& w, const V2& out, const Adapter& ad = {}) const override {
    proj_->forward(h, w, out, false, ad);
  }

 private:
  std::shared_ptr<const Linear<T, D>> proj_;
};

}  // namespace exa::model
