#pragma once
// The bytes ledger: what each kind of traffic would move uncompressed
// (logical bytes, fp32) and what it put on the wire, counted by this rank
// as the collectives are posted. The trainer reports the per-step change
// (metrics.jsonl "comm": {"<kind>": {"logical_bytes", "wire_bytes"}}), so a
// compressed collective's cut is read off the run itself.
//
// Counted today: data-parallel gradients (allreduce and reduce-scatter, over
// the Data and ExpertData groups) and ZeRO parameter allgathers, by
// parallel/data/data_group.cpp. The byte counts are a ring collective's
// per-rank sends: allreduce 2 (P-1)/P n, reduce-scatter and allgather
// (P-1)/P n elements of the whole buffer n.
#include <array>
#include <cstdint>

namespace exa::comm {

enum class Traffic { DpGrads, ZeroWeights };
constexpr int kTrafficKinds = 2;

struct TrafficBytes {
  double logical = 0, wire = 0;
};

class TrafficLedger {
 public:
  static void add(Traffic t, double logical, double wire);
  // Totals since the process started (single-threaded use: the step's thread).
  static std::array<TrafficBytes, kTrafficKinds> totals();
  static const char* name(Traffic t);  // "dp_grads", "zero_weights"
};

}  // namespace exa::comm
