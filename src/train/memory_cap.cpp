#include "train/memory_cap.hpp"

#include <array>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory_ledger.hpp"

namespace exa::train {

MemoryCap::MemoryCap(const deck::Config& cfg, MPI_Comm world)
    : world_(world), cap_gb_(cfg.get_float("memory.cap_gb")) {
  if (cap_gb_ <= 0) return;
  EXA_REQUIRE(MemoryLedger::installed(),
              "memory.cap_gb = {} needs the memory ledger, which a loaded Kokkos Tools library has displaced "
              "(unset KOKKOS_TOOLS_LIBS, or set memory.cap_gb = 0)",
              cap_gb_);
  MemoryLedger::set_cap(std::int64_t(std::llround(cap_gb_ * 1073741824.0)));
}

void MemoryCap::check(std::int64_t steps_done) const {
  if (cap_gb_ <= 0) return;
  const auto over = MemoryLedger::over_cap();
  int rank = 0;
  MPI_Comm_rank(world_, &rank);
  struct {
    double bytes;
    int rank;
  } mine{double(over.total), rank}, worst{};
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, world_);
  if (worst.bytes <= 0) return;
  std::array<double, kMemCategories> by{};
  for (int k = 0; k < kMemCategories; ++k) by[std::size_t(k)] = double(over.bytes[std::size_t(k)]);
  MPI_Bcast(by.data(), kMemCategories, MPI_DOUBLE, worst.rank, world_);
  std::string table;
  for (int k = 0; k < kMemCategories; ++k)
    table += fmt::format("{}{} {:.1f}", k ? ", " : "", MemoryLedger::name(MemCategory(k)), by[std::size_t(k)] / 1048576.0);
  throw Error(fmt::format(
      "memory.cap_gb = {}: rank {} needed {:.3f} GiB by step {} (MiB: {}); to fit, keep fewer activations "
      "(memory.recompute = \"selective\", or \"full\" with memory.checkpoint_layers = \"sqrt\"), keep the "
      "routed experts out of the compute memory (memory.offload_experts = true, and memory.offload_optimizer = "
      "true: on disk on host builds, in host memory on CUDA ones), shard the "
      "parameters, gradients and optimizer state (parallel.zero = 3) or the model (more tp, pp or ep ranks), "
      "use smaller micro-batches (train.micro_batch with more train.grad_accum), or raise the cap; `examoe DECK "
      "--check` estimates this table before a run",
      cap_gb_, worst.rank, worst.bytes / 1073741824.0, steps_done, table));
}

}  // namespace exa::train
