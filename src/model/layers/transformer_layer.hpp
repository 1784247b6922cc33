#pragma once
// One block: x_mid = x + Attn(RMSNorm(x)); out = x_mid + FFN(RMSNorm(x_mid)),
// with FFN the MoE block on MoE layers and the dense MLP otherwise.
#include <memory>
#include <vector>

#include "kernels/router.hpp"
#include "model/layers/attention_block.hpp"
#include "model/layers/dense_mlp.hpp"
#include "model/layers/moe_block.hpp"

namespace exa::model {

template <class T, class D = Device>
class TransformerLayer {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  using Rope = kernels::RopeTable<T, D>;

  TransformerLayer(std::int64_t index, std::unique_ptr<AttentionBlock<T, D>> attn,
                   std::unique_ptr<DenseMlp<T, D>> mlp, std::unique_ptr<MoeBlock<T, D>> moe)
      : index_(index), attn_(std::move(attn)), mlp_(std::move(mlp)), moe_(std::move(moe)) {}

  std::int64_t index() const { return index_; }
  bool is_moe() const { return moe_ != nullptr; }
  const AttentionBlock<T, D>& attention() const { return *attn_; }
  const DenseMlp<T, D>* mlp() const { return mlp_.get(); }
  const MoeBlock<T, D>* moe() const { return moe_.get(); }
  MoeBlock<T, D>* moe() { return moe_.get(); }
  std::vector<std::string> param_names() const {
    auto n = attn_->param_names();
    const auto f = moe_ ? moe_->param_names() : mlp_->param_names();
    n.insert(n.end(), f.begin(), f.end());
    return n;
  }

  // c.x -> out; returns the layer's router losses (zero on dense layers).
  kernels::RouterLosses forward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, MicroBatchShape mb,
                                const Rope& rope, const V2& out, LayerScratch<T, D>& s,
                                std::vector<LayerRouting>* routing) const {
    attn_->forward(c, lw, mb, rope);
    if (moe_) {
      moe_->forward(c, lw, out, s.moe_y, routing);
      return c.router_losses;
    }
    mlp_->forward(c, lw, out);
    return {};
  }

  // s.dres: d(loss)/d(out) on entry, d(loss)/d(c.x) on return.
  void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& lw, const LayerWeights<T, D>& lg,
                MicroBatchShape mb, const Rope& rope, double loss_scale, LayerScratch<T, D>& s) const {
    if (moe_)
      moe_->backward(c, lw, lg, loss_scale, s);
    else
      mlp_->backward(c, lw, lg, s);
    attn_->backward(c, lw, lg, mb, rope, s);
  }

 private:
  std::int64_t index_;
  std::unique_ptr<AttentionBlock<T, D>> attn_;
  std::unique_ptr<DenseMlp<T, D>> mlp_;
  std::unique_ptr<MoeBlock<T, D>> moe_;
};

}  // namespace exa::model
