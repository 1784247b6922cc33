#pragma once
// The run's energy, estimated: joules per token in each log line and kWh for
// the run at its end, the first number a large run's planner asks for.
//
// The source is the first that applies:
//   * output.power_w_per_rank > 0: that power on every rank for the wall time;
//   * RAPL counters readable on rank 0's host (Linux powercap,
//     <root>/intel-rapl:N/energy_uj, one per CPU package; the sub-zones
//     intel-rapl:N:M are parts of a package and are not added again): their
//     increase is the host's energy, shared over the ranks running on that
//     host and scaled to the world as if every host drew the same. The host
//     is the machine, not parallel.ranks_per_node's pretend node: RAPL
//     counts the machine's packages whatever the grid pretends;
//   * neither: no estimate (the log says nothing about energy).
// Either is multiplied by output.pue (the facility's overhead: cooling,
// power conversion). RAPL counts CPU packages (and DRAM where the package
// zone includes it), not GPUs, network or disks: a lower bound on a GPU node.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/deck/config.hpp"
#include "train/step_log.hpp"

namespace exa::train {

struct EnergyOptions {
  double power_w_per_rank = 0;  // 0 = measure (RAPL) when possible
  double pue = 1;
  std::string powercap_root = "/sys/class/powercap";
  // output.power_w_per_rank and output.pue.
  static EnergyOptions from_deck(const deck::Config& cfg);
};

// The package-level RAPL domains under a powercap directory.
class RaplCounters {
 public:
  explicit RaplCounters(const std::string& powercap_root);
  // At least one domain's energy_uj was readable (it is root-only on most
  // kernels since 5.10).
  bool readable() const { return !domains_.empty(); }
  std::size_t domains() const { return domains_.size(); }
  // Joules used by all domains since the previous call (since construction
  // the first time). A counter that wrapped past max_energy_range_uj counts
  // the wrap; one that went unreadable counts nothing.
  double joules();

 private:
  struct Domain {
    std::string file;          // .../intel-rapl:N/energy_uj
    std::uint64_t range_uj = 0;  // max_energy_range_uj (0: unknown, a decrease is then not counted)
    std::uint64_t last_uj = 0;
  };
  std::vector<Domain> domains_;
};

class EnergyMeter {
 public:
  // Collective over `world` (every rank of the run): it counts the ranks on
  // this rank's host (MPI_Comm_split_type SHARED), which share its RAPL
  // counters.
  EnergyMeter(const EnergyOptions& options, MPI_Comm world);
  // ranks_on_host: the ranks sharing this host's RAPL counters; world: every
  // rank of the run.
  EnergyMeter(const EnergyOptions& options, int ranks_on_host, int world);

  bool enabled() const { return power_w_ > 0 || rapl_.readable(); }
  // "RAPL: 2 packages on rank 0's host (4 ranks), scaled to 8 ranks, PUE 1.2"
  // or "300 W per rank (output.power_w_per_rank) x 8 ranks, PUE 1.2".
  std::string source() const;
  // Starts a measurement: what the next report() counts begins here.
  void restart();
  // Adds the energy of the `seconds` since the last call (or restart) to the
  // run's total and fills s.joules_per_token (for `tokens` tokens) and
  // s.kwh. Does nothing when !enabled().
  void report(StepLog& s, double seconds, double tokens);
  // The run's end: measured kWh and J/token so far, and the kWh of a whole
  // run of `planned_tokens` at that rate. Empty when !enabled().
  std::string summary(double tokens, double planned_tokens) const;

 private:
  double power_w_ = 0, pue_ = 1;
  int ranks_on_host_ = 1, world_ = 1;
  RaplCounters rapl_;
  double total_j_ = 0;  // the run's, PUE included
};

}  // namespace exa::train
