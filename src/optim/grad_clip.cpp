#include "optim/grad_clip.hpp"

#include <cmath>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "kernels/global_norm.hpp"

namespace exa::optim {

GradClipper::GradClipper(double max_norm, Reduction reduce) : max_norm_(max_norm), reduce_(std::move(reduce)) {
  EXA_REQUIRE(max_norm >= 0.0 && std::isfinite(max_norm),
              "gradient clipping: max norm must be finite and >= 0 (0 = no clipping), got {}", max_norm);
}

GradClipper GradClipper::from_deck(const deck::Config& c) { return GradClipper(c.get_float("optim.grad_clip")); }

void GradClipper::set_reduction(Reduction reduce) { reduce_ = std::move(reduce); }

double GradClipper::local_sq_norm(const model::ParameterStore& store) {
  if (store.trainable_numel() == 0) return 0.0;  // a rank may own nothing (small tensors, many ranks)
  if (const auto* tier = store.grad_tier()) {
    // Offloaded gradients leave memory piece by piece (the same sum).
    return kernels::global_sq_norm_pieces(store.trainable_grads(), tier->spans(), [&](std::size_t i) {
      store.offload_file()->sample();
      tier->release(tier->spans()[i]);
    });
  }
  return kernels::global_sq_norm(store.trainable_grads());
}

ClipResult GradClipper::from_sq_norm(double local_sq, double unscale) const {
  EXA_ASSERT(unscale > 0.0);
  const double total_sq = reduce_ ? reduce_(local_sq) : local_sq;
  ClipResult r;
  r.norm = std::sqrt(total_sq) * unscale;
  r.finite = std::isfinite(r.norm);
  if (!r.finite) {
    r.clip_coef = 0.0;
    r.grad_scale = 0.0;
    return r;
  }
  r.clip_coef = max_norm_ > 0.0 ? std::min(1.0, max_norm_ / (r.norm + 1e-6)) : 1.0;
  r.grad_scale = unscale * r.clip_coef;
  return r;
}

ClipResult GradClipper::compute(const model::ParameterStore& store, double unscale) const {
  return from_sq_norm(local_sq_norm(store), unscale);
}

void require_finite(const ClipResult& r, std::int64_t step) {
  EXA_REQUIRE(r.finite,
              "step {}: the gradient norm is {}, so the gradient holds inf or nan; the update was not applied. "
              "Lower optim.lr, raise optim.warmup_steps or set optim.grad_clip, and restart from the last "
              "checkpoint",
              step, r.norm);
}

}  // namespace exa::optim
