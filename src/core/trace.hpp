#pragma once
// A timeline of the run's phases (output.trace_steps): while recording,
// every exa::ScopedRegion and every span() is one complete event, written
// per rank in the Chrome trace event format, which chrome://tracing and
// ui.perfetto.dev show as one row per thread. It is how one sees that
// something overlaps: the expert all-to-all records the interval each
// posted part is in flight, and the work run meanwhile sits inside it.
#include <string>

namespace exa {

class Trace {
 public:
  // Starts recording (events so far are dropped); `rank` is the trace's pid.
  static void start(int rank);
  static bool on();
  // Stops and writes the events to `path` (JSON); exa::Error naming the
  // path when it cannot be written.
  static void stop_and_write(const std::string& path);
  // An interval recorded by hand, in wall_seconds() (core/profiling.hpp).
  static void span(const char* name, double start, double end);
};

}  // namespace exa
