#pragma once
// GradientHome: where a deferred weight gradient goes when the buffer it
// was recorded against is no longer its own by the time W runs
// (docs/architecture.md, "Pipeline parallelism").
//
// ZeRO 2/3 give a unit's gradient one of two alternating unit-sized
// buffers, reduce-scattered right after the unit's backward and then
// reused by the unit two behind it. A product deferred out of that
// backward would land in whatever unit holds the buffer when it runs. The
// home (the data-parallel engines) tells the queue, as it records a
// product, which unit's buffer the gradient is in and where; when W runs
// the queue asks it for a zeroed buffer of that unit, writes the products
// there at the same offsets, and hands it back to be reduce-scattered into
// the unit's part, as B's own reduction was. Reduce-scatter is a sum, so
// the two reductions add up to the one the unit would have had.
//
// The reductions are collectives over the data-parallel group: with a
// home, W runs at points fixed by the schedule (pipeline.cpp), the same on
// every replica of a stage, never where a message happens not to have come.
#include <cstddef>

namespace exa::parallel::pipeline {

class GradientHome {
 public:
  struct Place {
    int owner = -1;  // which of the home's buffer sets; < 0: the gradient's buffer outlives W (write it there)
    int unit = -1;
    std::ptrdiff_t offset = 0;  // elements from the unit's buffer start
    explicit operator bool() const { return owner >= 0; }
  };
  virtual ~GradientHome() = default;
  // Where the gradient at `grad` lives, while the backward that wrote it
  // is running.
  virtual Place locate(const float* grad) const = 0;
  // A zeroed buffer for one run of the unit's deferred products (offsets
  // as locate() gave them); then that run is done: reduce it.
  virtual float* open_deferred(int owner, int unit) = 0;
  virtual void close_deferred(int owner, int unit) = 0;
};

}  // namespace exa::parallel::pipeline
