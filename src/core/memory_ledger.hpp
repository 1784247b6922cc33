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
//
// Current and peak bytes per category; the trainer writes the peaks of each
// logging interval to metrics.jsonl ("mem") and restarts them.
#include <array>
#include <cstdint>
#include <string>

namespace exa {

enum class MemCategory { Parameters, Gradients, Optimizer, Activations, Communication, Checkpoint, Workspace };
constexpr int kMemCategories = 7;

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
  // Peaks restart from the current bytes (a new interval).
  static void restart_peaks();
  static MemCategory category_of(const std::string& label);
  static const char* name(MemCategory c);  // "parameters", ...
};

}  // namespace exa
