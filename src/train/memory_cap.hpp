#pragma once
// memory.cap_gb (docs/architecture.md, "Memory ledger"): the per-rank cap
// the memory ledger watches. After each step every rank learns whether any
// rank went above it, and all stop together with the same exa::Error: the
// worst rank's bytes by category and the deck settings that shrink each.
#include <mpi.h>

#include <cstdint>

#include "core/deck/config.hpp"

namespace exa::train {

class MemoryCap {
 public:
  // Sets the ledger's cap from the deck (0: none; then check does nothing).
  MemoryCap(const deck::Config& cfg, MPI_Comm world);
  // Collective over `world` when a cap is set; throws after step `steps_done`.
  void check(std::int64_t steps_done) const;

 private:
  MPI_Comm world_;
  double cap_gb_ = 0;
};

}  // namespace exa::train
