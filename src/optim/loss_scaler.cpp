#include "optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace exa::optim {

LossScaler::LossScaler(bool dynamic, double initial, std::int64_t window)
    : dynamic_(dynamic), scale_(initial), window_(window) {
  EXA_REQUIRE(initial > 0 && std::isfinite(initial), "precision.loss_scale = {} must be a finite number > 0",
              initial);
  EXA_REQUIRE(window >= 1, "precision.loss_scale_window = {} must be at least 1", window);
}

LossScaler LossScaler::from_deck(const deck::Config& cfg) {
  return LossScaler(cfg.get_string("precision.loss_scaling") == "dynamic", cfg.get_float("precision.loss_scale"),
                    cfg.get_int("precision.loss_scale_window"));
}

bool LossScaler::after_step(bool finite_grads) {
  if (!dynamic_) return false;
  if (finite_grads) {
    if (++clean_ >= window_) {
      // fp32 holds the scale exactly up to 2^127; a scale near that would
      // overflow every gradient anyway, so growth stops well below.
      if (scale_ < 0x1p100) scale_ *= 2;
      clean_ = 0;
    }
    return false;
  }
  clean_ = 0;
  if (scale_ <= 1.0) return false;
  scale_ = std::max(1.0, scale_ / 2);
  ++skips_;
  return true;
}

std::vector<float> LossScaler::state() const { return {float(scale_), float(clean_), float(skips_)}; }

void LossScaler::restore(const std::vector<float>& s) {
  if (s.empty() || !dynamic_) return;
  EXA_REQUIRE(s.size() == 3 && s[0] > 0 && std::isfinite(s[0]) && s[1] >= 0 && s[2] >= 0,
              "the checkpoint's loss_scaler state is malformed ({} values; want scale > 0, clean steps and skips "
              ">= 0): resume from another checkpoint, or set precision.loss_scaling = \"static\"",
              s.size());
  scale_ = s[0];
  clean_ = std::int64_t(s[1]);
  skips_ = std::int64_t(s[2]);
}

}  // namespace exa::optim
