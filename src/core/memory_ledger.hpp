#pragma once
// The memory ledger: every Kokkos allocation, on every memory space,
// counted by category as it happens (a Kokkos Tools allocate/deallocate
// callback, so no View the trainer or a library makes is missed). The
// category comes from the View's label (`exa::<area>::...`, the project's
// naming rule), by the first matching prefix:
//
//   parameters     exa::params, exa::dp::params, exa::dp::param_slot
//   gradients      exa::grads, exa::dp::grads, exa::dp::grad_slot
//   optimizer      exa::optim::
//   activations    exa::model:: (activation contexts, the layers' scratch)
//   communication  exa::dp::, exa::dp_packed, exa::pipeline::, exa::ep::,
//                  exa::tp, exa::context::, exa::comm::
//   checkpoint     exa::ckpt::
//   workspace      everything else (kernels' scratch, batches, evaluation)
//   offload        memory.offload_experts' file-backed pages resident in
//                  the process, measured (core/offload_tier.hpp) whenever
//                  the offload sampled them, not counted per allocation
//
// Memory the project maps itself (the offload tier's anonymous part) is
// recorded by label with record().
//
// Current and peak bytes per category; the trainer writes the peaks of each
// logging interval to metrics.jsonl ("mem") and restarts them.
//
// A cap (memory.cap_gb) bounds the sum over categories. The allocation
// that crosses it is not refused (a callback cannot fail an allocation);
// the ledger remembers the largest sum seen above the cap and the
// categories' bytes at that moment, and the trainer stops the run with
// them at the end of the step (every rank together).
#include <array>
#include <cstdint>
#include <string>

namespace exa {

enum class MemCategory { Parameters, Gradients, Optimizer, Activations, Communication, Checkpoint, Workspace, Offload };
constexpr int kMemCategories = 8;

struct MemBytes {
  std::int64_t current = 0, peak = 0;
};

class MemoryLedger {
 public:
  // Installs the callbacks (after Kokkos is initialised; once). False, and
  // nothing installed, when a Kokkos Tools library is loaded: it owns the
  // callbacks then, and the ledger reports nothing.
  static bool install();
  static bool installed();
  static std::array<MemBytes, kMemCategories> snapshot();
  // Bytes allocated (> 0) or freed (< 0) outside Kokkos, by label.
  static void record(const std::string& label, std::int64_t bytes);
  // A measured category's bytes now (its peak follows).
  static void set_sampled(MemCategory c, std::int64_t bytes);
  // Peaks restart from the current bytes (a new interval).
  static void restart_peaks();
  // The cap on the sum over categories (0: none), and what was seen above it.
  static void set_cap(std::int64_t bytes);
  static std::int64_t cap();
  struct OverCap {
    std::int64_t total = 0;                        // 0: never above the cap
    std::array<std::int64_t, kMemCategories> bytes{};  // each category's current bytes then
  };
  static OverCap over_cap();
  static MemCategory category_of(const std::string& label);
  static const char* name(MemCategory c);  // "parameters", ...
};

}  // namespace exa
