#pragma once
// RMSNorm with a learned gain: x * rsqrt(mean(x^2) + eps) * w.
//
// Under tensor parallelism every rank holds the same rows and the same
// gain, so the gain's gradient is split instead of repeated: a norm built
// with part p of `parts` sums the weight gradient over its own 1/parts of
// the rows only (the input gradient stays whole), and the tensor-parallel
// gradient reduction adds the parts (parallel/tensor/replicated_grads.hpp).
#include <string>
#include <utility>

#include "core/types.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/weights.hpp"

namespace exa::model {

// Part `part` of `parts` of the rows of a pass, balanced (any row count).
struct RowShare {
  std::int64_t part = 0, parts = 1;
  std::pair<std::int64_t, std::int64_t> rows(std::int64_t n) const { return {n * part / parts, n * (part + 1) / parts}; }
};

template <class T, class D = Device>
class RMSNorm {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using W1 = typename LayerWeights<T, D>::W1;

  RMSNorm(std::string param_name, double eps, RowShare grad_rows = {})
      : name_(std::move(param_name)), eps_(eps), share_(grad_rows) {}
  const std::string& param_name() const { return name_; }

  void forward(const V2& x, const W1& w, const V2& xn, const V1& rstd) const {
    kernels::rmsnorm_forward(x, w, xn, rstd, eps_);
  }
  // dx (+)= d/dx given dxn; dw += d/dw (over this norm's share of the rows).
  void backward(const V2& x, const W1& w, const V1& rstd, const V2& dxn, const V2& dx, const W1& dw,
                bool accumulate_dx) const {
    if (dw.data() == nullptr) {
      // A frozen gain (LoRA): its sums go to the discarded buffer.
      if (discard_.extent(0) != w.extent(0)) discard_ = V1("exa::model::rmsnorm_discard", w.extent(0));
      kernels::rmsnorm_backward(x, w, rstd, dxn, dx, discard_, false, accumulate_dx);
      return;
    }
    if (share_.parts == 1) {
      kernels::rmsnorm_backward(x, w, rstd, dxn, dx, dw, true, accumulate_dx);
      return;
    }
    // The rows outside the share still need their input gradient; their
    // weight-gradient sums go to a discarded buffer.
    const std::int64_t n = x.extent(0);
    if (discard_.extent(0) != w.extent(0)) discard_ = V1("exa::model::rmsnorm_discard", w.extent(0));
    const auto [r0, r1] = share_.rows(n);
    const std::pair<std::int64_t, std::int64_t> parts[3] = {{0, r0}, {r0, r1}, {r1, n}};
    for (int k = 0; k < 3; ++k) {
      const auto [a, b] = parts[k];
      if (a == b) continue;
      const auto r = Kokkos::make_pair(std::size_t(a), std::size_t(b));
      const auto sx = Kokkos::subview(x, r, Kokkos::ALL), sdxn = Kokkos::subview(dxn, r, Kokkos::ALL);
      const auto sdx = Kokkos::subview(dx, r, Kokkos::ALL);
      const auto srstd = Kokkos::subview(rstd, r);
      if (k == 1)
        kernels::rmsnorm_backward(sx, w, srstd, sdxn, sdx, dw, true, accumulate_dx);
      else
        kernels::rmsnorm_backward(sx, w, srstd, sdxn, sdx, discard_, false, accumulate_dx);
    }
  }

 private:
  std::string name_;
  double eps_;
  RowShare share_;
  mutable V1 discard_;
};

}  // namespace exa::model
