#pragma once
// The bytes ledger: what each kind of traffic would move uncompressed
// (logical bytes, fp32) and what it put on the wire, counted by this rank
// as the collectives are posted. The trainer reports the per-step change
// (metrics.jsonl "comm": {"<kind>": {"logical_bytes", "wire_bytes"}}), so a
// compressed collective's cut is read off the run itself.
//
// Kinds: data-parallel gradients (allreduce and reduce-scatter, over the
// Data and ExpertData groups) and ZeRO parameter allgathers
// (parallel/data/data_group.cpp); the expert all-to-all's token rows
// (parallel/expert/all_to_all_dispatcher.hpp); tensor parallelism's
// collectives (parallel/tensor/tp_comm.hpp); the pipeline's activations and
// their gradients (parallel/pipeline/pipeline.cpp); context parallelism's
// ring blocks and all-to-all (parallel/context/). Collectives count a ring
// algorithm's per-rank sends: allreduce 2 (P-1)/P n, reduce-scatter and
// allgather (P-1)/P n elements of the whole buffer n; point-to-point and
// all-to-all what leaves the rank. Only the DP gradients are compressed
// today, so elsewhere wire = logical.
#include <array>
#include <cstdint>

namespace exa::comm {

// A ring collective's per-rank sends over p ranks, in bytes of `elem`: an
// allreduce of n elements sends 2 (p-1)/p n; a reduce-scatter or an
// allgather of blocks b sends (p-1) b.
inline double ring_allreduce_bytes(int p, std::int64_t n, double elem) {
  return 2.0 * (p - 1) / p * double(n) * elem;
}
inline double ring_block_bytes(int p, std::int64_t b, double elem) { return double(p - 1) * double(b) * elem; }

enum class Traffic { DpGrads, ZeroWeights, ExpertA2a, Tp, PpP2p, Cp };
constexpr int kTrafficKinds = 6;

struct TrafficBytes {
  double logical = 0, wire = 0;
};

class TrafficLedger {
 public:
  static void add(Traffic t, double logical, double wire);
  // Uncompressed traffic: `bytes` both logical and on the wire.
  static void sent(Traffic t, double bytes) { add(t, bytes, bytes); }
  // Totals since the process started (single-threaded use: the step's thread).
  static std::array<TrafficBytes, kTrafficKinds> totals();
  // "dp_grads", "zero_weights", "expert_a2a", "tp", "pp_p2p", "cp"
  static const char* name(Traffic t);
};

}  // namespace exa::comm
