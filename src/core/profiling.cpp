#include "core/profiling.hpp"

#include <Kokkos_Core.hpp>
#include <chrono>

#include "core/trace.hpp"

namespace exa {

void PhaseTimers::add(const std::string& name, double seconds) { totals_[name] += seconds; }

double PhaseTimers::total(const std::string& name) const {
  auto it = totals_.find(name);
  return it == totals_.end() ? 0.0 : it->second;
}

PhaseTimers& phase_timers() {
  static PhaseTimers t;
  return t;
}

double wall_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

ScopedRegion::ScopedRegion(const char* name, bool fence) : name_(name), fence_(fence), start_(wall_seconds()) {
  Kokkos::Profiling::pushRegion(name_);
}

ScopedRegion::~ScopedRegion() {
  if (fence_) Kokkos::fence();
  Kokkos::Profiling::popRegion();
  const double end = wall_seconds();
  phase_timers().add(name_, end - start_);
  if (Trace::on()) Trace::span(name_, start_, end);
}

}  // namespace exa
