#pragma once
// Named phases: each is a Kokkos profiling region (so Kokkos Tools such as
// the space-time-stack or nvtx connectors see ExaMoE's phases unchanged) and
// an accumulating wall-clock timer for ExaMoE's own per-phase breakdown.
#include <map>
#include <string>

namespace exa {

class PhaseTimers {
 public:
  void add(const std::string& name, double seconds);
  double total(const std::string& name) const;
  const std::map<std::string, double>& all() const { return totals_; }
  void reset() { totals_.clear(); }

 private:
  std::map<std::string, double> totals_;
};

// The process-wide phase table.
PhaseTimers& phase_timers();

// RAII: push a Kokkos region on entry; on exit, optionally fence (so device
// work is charged to the right phase) then pop and accumulate.
class ScopedRegion {
 public:
  explicit ScopedRegion(const char* name, bool fence = false);
  ~ScopedRegion();
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;

 private:
  const char* name_;
  bool fence_;
  double start_;
};

double wall_seconds();

}  // namespace exa
