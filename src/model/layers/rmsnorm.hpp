#pragma once
// RMSNorm with a learned gain: x * rsqrt(mean(x^2) + eps) * w.
#include <string>

#include "core/types.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/weights.hpp"

namespace exa::model {

template <class T, class D = Device>
class RMSNorm {
 public:
  using V1 = Kokkos::View<T*, Layout, D>;
  using V2 = Kokkos::View<T**, Layout, D>;
  using W1 = typename LayerWeights<T, D>::W1;

  RMSNorm(std::string param_name, double eps) : name_(std::move(param_name)), eps_(eps) {}
  const std::string& param_name() const { return name_; }

  void forward(const V2& x, const W1& w, const V2& xn, const V1& rstd) const {
    kernels::rmsnorm_forward(x, w, xn, rstd, eps_);
  }
  // dx (+)= d/dx given dxn; dw += d/dw.
  void backward(const V2& x, const W1& w, const V1& rstd, const V2& dxn, const V2& dx, const W1& dw,
                bool accumulate_dx) const {
    kernels::rmsnorm_backward(x, w, rstd, dxn, dx, dw, true, accumulate_dx);
  }

 private:
  std::string name_;
  double eps_;
};

}  // namespace exa::model
