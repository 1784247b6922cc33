#pragma once
// The single-rank Linear: one gemm per product (kernels/gemm.hpp).
#include "kernels/gemm.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalLinear final : public Linear<T, D> {
 public:
  using typename Linear<T, D>::Act;
  using typename Linear<T, D>::Wt;
  using typename Linear<T, D>::Adapter;

  void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
               const Adapter& ad = {}) const override {
    kernels::gemm('N', 'T', T(1), x, w, accumulate ? T(1) : T(0), y);
    if (ad) lora::forward(x, ad, y, lora_);
  }
  void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                      const Adapter& ad = {}) const override {
    kernels::gemm('N', 'N', T(1), dy, w, accumulate ? T(1) : T(0), dx);
    if (ad) lora::backward_input(dy, ad, dx, lora_);
  }
  void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                       const Adapter& ad = {}) const override {
    if (dw.data() != nullptr) kernels::gemm('T', 'N', T(1), dy, x, accumulate ? T(1) : T(0), dw);
    if (ad) lora::backward_weight(x, dy, ad, accumulate, lora_);
  }

 private:
  mutable lora::Scratch<T, D> lora_;  // the adapters' products
};

}  // namespace exa::model
