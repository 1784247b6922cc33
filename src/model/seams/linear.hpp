#pragma once
// Linear: the seam every projection of the model goes through
// (docs/architecture.md, "Seams"). y = x W^T with W stored [out, in] as in
// PyTorch's nn.Linear, on this rank's piece of W.
//
// Tensor parallelism replaces it with column- and row-parallel versions that
// add the collectives around the same local product; the zero-bubble
// pipeline schedule runs backward_input on the critical path and defers
// backward_weight. The local version (local_linear.hpp) is the plain gemm.
#include <utility>

#include "core/types.hpp"
#include "model/weights.hpp"

namespace exa::model {

// A projection's low-rank adapter (lora_ops.hpp): this rank's pieces of A
// [r, in] and B [out, r], their gradients, and the scale alpha / r. Empty
// (false) for a projection without one.
template <class T, class D = Device>
struct LoraAdapter {
  using W2 = typename LayerWeights<T, D>::W2;
  W2 a, b, da, db;
  T scale = T(0);
  // Dropout on the adapter's input: probability and the micro-batch's key
  // for this projection (0: none, e.g. evaluation).
  T dropout = T(0);
  std::uint64_t key = 0;
  explicit operator bool() const { return a.data() != nullptr; }
  bool drops() const { return dropout > T(0) && key != 0; }
};

template <class T, class D = Device>
class Linear {
 public:
  using Act = Kokkos::View<T**, Layout, D>;
  using Wt = typename LayerWeights<T, D>::W2;
  using Adapter = LoraAdapter<T, D>;

  virtual ~Linear() = default;
  // y[N,out] = x[N,in] W^T  (+ y when accumulate), plus the adapter's
  // s (x A^T) B^T when there is one.
  virtual void forward(const Act& x, const Wt& w, const Act& y, bool accumulate = false,
                       const Adapter& ad = {}) const = 0;
  // dx[N,in] = dy W  (+ dx when accumulate) (+ s (dy B) A).
  virtual void backward_input(const Act& dy, const Wt& w, const Act& dx, bool accumulate = false,
                              const Adapter& ad = {}) const = 0;
  // dW[out,in] = dy^T x  (+ dW when accumulate; gradients accumulate over
  // micro-batches, so that is the default); the adapter's dA and dB the
  // same way. A frozen W (LoRA) has no dW (no data): its product is skipped.
  virtual void backward_weight(const Act& x, const Act& dy, const Wt& dw, bool accumulate = true,
                               const Adapter& ad = {}) const = 0;
  // What backward_weight(x, dy) multiplies, in a form on which it needs no
  // collective: the zero-bubble schedule takes these during B, where every
  // rank of a tensor-parallel group enters the same collectives in the same
  // order, and runs the product later, at a time each rank picks alone.
  // Under sequence parallelism the tensor-parallel linears gather x or dy
  // over the Tp group here (into scratch the next call reuses); otherwise
  // they are x and dy.
  virtual std::pair<Act, Act> weight_operands(const Act& x, const Act& dy) const { return {x, dy}; }

  // Both halves of the backward, input gradient first (skipped when dx has
  // no data). Virtual so that tensor parallelism can run the weight gradient
  // while the input gradient's reduction is in flight.
  virtual void backward(const Act& x, const Wt& w, const Act& dy, const Act& dx, const Wt& dw,
                        bool accumulate_dx = false, const Adapter& ad = {}) const {
    if (dx.data() != nullptr) backward_input(dy, w, dx, accumulate_dx, ad);
    backward_weight(x, dy, dw, true, ad);
  }
};

}  // namespace exa::model
