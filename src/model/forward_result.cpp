#include "model/forward_result.hpp"

#include <algorithm>

namespace exa::model {

double LayerRouting::imbalance() const {
  if (routed.empty()) return 1.0;
  std::int64_t mx = 0, sum = 0;
  for (auto c : routed) {
    mx = std::max(mx, c);
    sum += c;
  }
  return sum > 0 ? static_cast<double>(mx) * static_cast<double>(routed.size()) / static_cast<double>(sum) : 1.0;
}

double ForwardResult::max_imbalance() const {
  double m = 1.0;
  for (const auto& r : routing) m = std::max(m, r.imbalance());
  return m;
}

double ForwardResult::mean_imbalance() const {
  if (routing.empty()) return 1.0;
  double s = 0;
  for (const auto& r : routing) s += r.imbalance();
  return s / static_cast<double>(routing.size());
}

}  // namespace exa::model
