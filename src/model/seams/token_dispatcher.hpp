#pragma once
// TokenDispatcher: how routed tokens reach their experts and come back
// (docs/architecture.md, "Seams"). Given the router's choices in the layer
// context (topk [N,k], gates [N,k]):
//
//   y[n] = sum_j gates[n,j] * Expert_{topk[n,j]}(xn[n])
//
// with Expert_e(x) = w2_e (silu(w1_e x) * w3_e x), honouring the capacity
// (ceil(c * N * k / E) slots per expert, overflow dropped in token order,
// decided here, at the tokens' own rank). The local dispatcher permutes,
// runs one grouped gemm per expert and unpermutes; expert parallelism
// replaces it with an all-to-all version over this rank's expert range.
#include <cstdint>
#include <functional>
#include <type_traits>

#include "core/types.hpp"
#include "kernels/matmul_precision.hpp"
#include "model/activation_context.hpp"
#include "model/weights.hpp"

namespace exa::model {

// Whether the dispatchers keep the routed experts' tensors in bf16
// (TokenDispatcher::stores_bf16) for an MoE layer with weights w: bf16
// products, and no adapters on the experts (LoRA reads and adds to the
// fp32 rows). Forward and backward ask it alike.
template <class T, class D>
bool experts_in_bf16(const LayerWeights<T, D>& w) {
  return std::is_same<T, float>::value && kernels::matmul_precision() == kernels::MatmulPrecision::bf16 &&
         w.lora_w1.a.data() == nullptr && w.lora_w2.a.data() == nullptr;
}

template <class T, class D = Device>
class TokenDispatcher {
 public:
  using V2 = Kokkos::View<T**, Layout, D>;
  // Work that needs none of the dispatcher's results (the shared experts),
  // run once by each call, while the exchange is in flight where there is
  // a non-blocking one (the all-to-all in parts), else before the experts.
  using Meanwhile = std::function<void()>;

  virtual ~TokenDispatcher() = default;
  // Fills the dispatch state of c (plan, permuted rows) and overwrites y [N,d].
  // capacity = 0 is dropless.
  virtual void forward(LayerContext<T, D>& c, const LayerWeights<T, D>& w, std::int64_t capacity, const V2& xn,
                       const V2& y, const Meanwhile& meanwhile = {}) = 0;
  // From dy [N,d]: overwrites dxn [N,d] and dgates [N,k], accumulates the
  // expert weights' gradients into g.
  virtual void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& w, const LayerWeights<T, D>& g,
                        const V2& dy, const V2& dxn, const V2& dgates, const Meanwhile& meanwhile = {}) = 0;
  // Bytes of scratch the dispatcher keeps between calls.
  virtual std::size_t scratch_bytes() const { return 0; }
  // Whether forward keeps the routed experts' rows and activations in bf16
  // (LayerContext::xp16, ea16, eb16, eh16) under bf16 products when the
  // experts carry no adapters, so that contexts need no fp32 views for
  // them. A dispatcher that does not
  // stores them in fp32, with ea and eb rounded to bf16 all the same
  // (kernels::round_through_bf16): every layout computes the same values.
  virtual bool stores_bf16() const { return false; }
  // Whether backward reads the permuted rows (LayerContext::xp, xp16), so
  // that contexts keep them; the all-to-all reads the received rows (xr)
  // instead.
  virtual bool keeps_permuted_rows() const { return true; }
};

}  // namespace exa::model
