#pragma once
// The dense FFN sub-block: out = x_mid + w2(silu(w1 xn) * w3 xn) with
// xn = RMSNorm(x_mid); w1/w3 column-parallel, w2 row-parallel (one
// reduction per MLP under tensor parallelism). d_ff is this rank's columns.
#include <memory>
#include <string>

#include "core/profiling.hpp"
#include "kernels/swiglu.hpp"
#include "model/activation_context.hpp"
#include "model/layers/rmsnorm.hpp"
#include "model/layers/scratch.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class DenseMlp {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using LinearP = std::shared_ptr<const Linear<T, D>>;

  DenseMlp(std::int64_t layer, std::int64_t d_ff, double norm_eps, LinearP column, LinearP row, bool fence,
           RowShare norm_grad_rows = {})
      : prefix_("layers." + std::to_string(layer) + "."),
        d_ff_(d_ff),
        norm_(prefix_ + "ffn_norm.weight", norm_eps, norm_grad_rows),
        column_(std::move(column)),
        row_(std::move(row)),
        fence_(fence) {}

  std::int64_t d_ff() const { return d_ff_; }
  std::vector<std::string> param_names() const {
    return {norm_.param_name(), prefix_ + "mlp.w1", prefix_ + "mlp.w3", prefix_ + "mlp.w2"};
  }

  void forward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const V2& out) const {
    ScopedRegion region("forward/ffn", fence_);
    norm_.forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd);
    column_->forward(c.ffn_xn, lw.mlp_w1, c.a, false, lora::in(c, lw, lw.lora_mlp_w1, 5));
    column_->forward(c.ffn_xn, lw.mlp_w3, c.b, false, lora::in(c, lw, lw.lora_mlp_w3, 6));
    kernels::swiglu_forward(c.a, c.b, c.h);
    Kokkos::deep_copy(out, c.x_mid);
    row_->forward(c.h, lw.mlp_w2, out, /*accumulate=*/true, lora::in(c, lw, lw.lora_mlp_w2, 7));
  }

  // s.dres: d(loss)/d(out) on entry, d(loss)/d(x_mid) on return.
  void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                LayerScratch<T, D>& s) const {
    ScopedRegion region("backward/ffn", fence_);
    if (c.shared_cheap) kernels::swiglu_forward(c.a, c.b, c.h);  // selective recompute
    row_->backward(c.h, lw.mlp_w2, s.dres, s.ddh, lg.mlp_w2, false,
                   lora::in(c, lw, lw.lora_mlp_w2, 7, &lg.lora_mlp_w2));
    kernels::swiglu_backward(c.a, c.b, s.ddh, s.dda, s.ddb);
    if (c.shared_cheap) norm_.forward(c.x_mid, lw.ffn_norm, c.ffn_xn, c.ffn_rstd);
    column_->backward(c.ffn_xn, lw.mlp_w1, s.dda, s.dxn, lg.mlp_w1, /*accumulate_dx=*/false,
                      lora::in(c, lw, lw.lora_mlp_w1, 5, &lg.lora_mlp_w1));
    column_->backward(c.ffn_xn, lw.mlp_w3, s.ddb, s.dxn, lg.mlp_w3, true,
                      lora::in(c, lw, lw.lora_mlp_w3, 6, &lg.lora_mlp_w3));
    norm_.backward(c.x_mid, lw.ffn_norm, c.ffn_rstd, s.dxn, s.dres, lg.ffn_norm, /*accumulate_dx=*/true);
  }

 private:
  std::string prefix_;
  std::int64_t d_ff_;
  RMSNorm<T, D> norm_;
  LinearP column_, row_;
  bool fence_;
};

}  // namespace exa::model
