#pragma once
// Fused AdamW with decoupled weight decay, one pass over a flat tensor.
//
// Matches torch.optim.AdamW (amsgrad=False, foreach/fused off), operation
// for operation, with the gradient first multiplied by `grad_scale` (global
// norm clipping and/or loss-scale removal folded into the update):
//
//   g     = grad * grad_scale
//   p     = p * (1 - lr * weight_decay)
//   m     = beta1 * m + (1 - beta1) * g
//   v     = beta2 * v + (1 - beta2) * g * g
//   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//   p     = p - (lr / (1 - beta1^step)) * (m / denom)
//
// With `variance_frozen_at` = N > 0 and step > N (optim.freeze_variance_step,
// 1-bit Adam's variance freeze), v keeps its value after update N and its
// bias correction is N's: the update becomes linear in the gradient, so a
// gradient that arrives late (top-k's error feedback) moves the weight as
// far as it would have on time (clipping and weight decay aside). An
// element whose v is still exactly 0 (it never had a gradient: an expert no
// token reached, a token not yet seen) takes its first gradient as Adam's
// first step does, v = (1 - beta2^N) g * g so that the corrected v is g * g,
// and keeps that: it is not divided by eps alone, nor by a v that one step
// of (1 - beta2) left far below its gradients' size.
//
// Scalar coefficients are formed on the host in double (as PyTorch does with
// its Python-float hyper-parameters) and applied in the tensor's precision.
// `step` is 1-based: the number of updates including this one.
//
// The four Views may be of any rank but must hold contiguous memory of the
// same span and the same layout; the update is element-wise, so sharded
// optimizer state (ZeRO) just passes its shard. Runs in param's execution
// space.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"
#include "kernels/host_loops.hpp"

namespace exa::kernels {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  std::int64_t step = 1;    // 1-based, for bias correction
  double grad_scale = 1.0;  // multiplies the gradient first
  std::int64_t variance_frozen_at = 0;  // 0: v updates every step
};

namespace adamw_detail {

template <class V>
auto flat(const V& v) {
  using F = Kokkos::View<typename V::value_type*, Kokkos::LayoutRight, typename V::device_type,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return F(v.data(), v.span());
}

template <class P, class V>
void check_like(const P& param, const V& v, const char* what) {
  static_assert(std::is_same<typename P::array_layout, typename V::array_layout>::value,
                "adamw: all tensors must have the same layout");
  static_assert(static_cast<int>(P::rank) == static_cast<int>(V::rank), "adamw: all tensors must have the same rank");
  static_assert(Kokkos::SpaceAccessibility<exec_of<P>, typename V::memory_space>::accessible,
                "adamw: every tensor must be accessible from param's execution space");
  for (int r = 0; r < static_cast<int>(P::rank); ++r) {
    EXA_REQUIRE(param.extent(r) == v.extent(r), "adamw: {} extent {} is {}, param's is {}", what, r, v.extent(r),
                param.extent(r));
  }
  EXA_REQUIRE(v.span_is_contiguous(), "adamw: {} ('{}') must be contiguous", what, v.label());
}

inline void check_hyper(const AdamWHyper& h) {
  EXA_REQUIRE(h.step >= 1, "adamw: step must be >= 1 (1-based, counts this update), got {}", h.step);
  EXA_REQUIRE(h.beta1 >= 0.0 && h.beta1 < 1.0, "adamw: beta1 must be in [0, 1), got {}", h.beta1);
  EXA_REQUIRE(h.beta2 >= 0.0 && h.beta2 < 1.0, "adamw: beta2 must be in [0, 1), got {}", h.beta2);
  EXA_REQUIRE(h.eps > 0.0, "adamw: eps must be > 0, got {}", h.eps);
  EXA_REQUIRE(h.lr >= 0.0, "adamw: lr must be >= 0, got {}", h.lr);
  EXA_REQUIRE(h.weight_decay >= 0.0, "adamw: weight_decay must be >= 0, got {}", h.weight_decay);
  EXA_REQUIRE(h.variance_frozen_at >= 0, "adamw: variance_frozen_at must be >= 0, got {}", h.variance_frozen_at);
}

}  // namespace adamw_detail

template <class P, class G, class M, class S>
void adamw_step(const P& param, const G& grad, const M& exp_avg, const S& exp_avg_sq, const AdamWHyper& h,
                const exec_of<P>& exec = exec_of<P>{}) {
  using T = scalar_of<P>;
  static_assert(std::is_floating_point<T>::value, "adamw: param must hold float or double");
  static_assert(std::is_same<typename M::value_type, T>::value && std::is_same<typename S::value_type, T>::value,
                "adamw: exp_avg and exp_avg_sq must hold param's (non-const) scalar type");
  static_assert(std::is_same<typename P::value_type, T>::value, "adamw: param must be writable");
  adamw_detail::check_hyper(h);
  EXA_REQUIRE(param.span_is_contiguous(), "adamw: param ('{}') must be contiguous", param.label());
  adamw_detail::check_like(param, grad, "grad");
  adamw_detail::check_like(param, exp_avg, "exp_avg");
  adamw_detail::check_like(param, exp_avg_sq, "exp_avg_sq");

  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const bool frozen = h.variance_frozen_at > 0 && h.step > h.variance_frozen_at;
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(frozen ? h.variance_frozen_at : h.step));
  const T gs = static_cast<T>(h.grad_scale);
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), omb1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), omb2 = static_cast<T>(1.0 - h.beta2);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T first = static_cast<T>(bc2);  // frozen, v == 0: v = bc2 g^2
  const T eps = static_cast<T>(h.eps);
  const T step_size = static_cast<T>(h.lr / bc1);

  if constexpr (detail::host_exec<exec_of<P>>) {
    // One pass over value, grad, m and v in chunks (host_loops.hpp).
    T* pp = param.data();
    const auto* pg = grad.data();
    T* pm = exp_avg.data();
    T* pv = exp_avg_sq.data();
    detail::for_host_chunks("exa::adamw::step", exec, static_cast<index_t>(param.span()),
                            [=](index_t i0, index_t i1) {
                              for (index_t i = i0; i < i1; ++i) {
                                const T gi = static_cast<T>(pg[i]) * gs;
                                const T pi = pp[i] * decay;
                                const T mi = pm[i] * b1 + omb1 * gi;
                                const T vi = !frozen ? pv[i] * b2 + (omb2 * gi) * gi : pv[i] > T(0) ? pv[i] : (first * gi) * gi;
                                const T denom = kx::sqrt(vi) / bc2_sqrt + eps;
                                pm[i] = mi;
                                pv[i] = vi;
                                pp[i] = pi - step_size * (mi / denom);
                              }
                            });
    return;
  }
  const auto p = adamw_detail::flat(param);
  const auto g = adamw_detail::flat(grad);
  const auto m = adamw_detail::flat(exp_avg);
  const auto v = adamw_detail::flat(exp_avg_sq);
  Kokkos::parallel_for(
      "exa::adamw::step", Kokkos::RangePolicy<exec_of<P>>(exec, 0, p.extent(0)), KOKKOS_LAMBDA(const std::size_t i) {
        const T gi = static_cast<T>(g(i)) * gs;
        const T pi = p(i) * decay;
        const T mi = m(i) * b1 + omb1 * gi;
        const T vi = !frozen ? v(i) * b2 + (omb2 * gi) * gi : v(i) > T(0) ? v(i) : (first * gi) * gi;
        const T denom = kx::sqrt(vi) / bc2_sqrt + eps;
        m(i) = mi;
        v(i) = vi;
        p(i) = pi - step_size * (mi / denom);
      });
}

}  // namespace exa::kernels
