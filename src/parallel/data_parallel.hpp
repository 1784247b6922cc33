#pragma once
// DataParallel: data parallelism over the grid's Data group with ZeRO
// stages 0-3, bucketed gradient reduction overlapped with the backward pass,
// and flat or hierarchical collectives.
//
// It owns the parameters: the master ParameterStore (this rank's part for
// zero >= 1, everything for zero = 0; the optimizer and the checkpoint work
// on it) and the working copies the transformer reads and writes, bound as
// model::Weights. It is the transformer's UnitHooks, and the trainer drives
// it around each step:
//
//   dp.begin_step();                                   // zero the gradients
//   for (j = 0; j < M; ++j) {
//     dp.set_sync(j == M - 1);                         // zero 0/1: reduce on the last micro-batch only
//     model.forward(dp.weights(), ...); model.backward(dp.weights(), dp.grads(), seed);
//   }
//   dp.finish_gradients();                             // store().grads() = dp-mean of this rank's part
//   opt.step(dp.store(), step);                        // clip (norm_reduction) + AdamW on the part
//   dp.params_updated();                               // refresh the working copies
//
// Stages (dp ranks, P parameters):
//   zero 0  replicas; gradients allreduced in buckets of comm.bucket_mb, each
//           launched as soon as the backward has finished its units.
//   zero 1  replicas for forward/backward, but AdamW state and master weights
//           only for this rank's part: on the last micro-batch each unit's
//           accumulated gradient is reduce-scattered into the part as soon
//           as its backward is done, and after the step the parts are
//           allgathered into the replica (zero 0's traffic, in two halves),
//           landing during the next forward, each unit waited for before use.
//   zero 2  as 1, but gradients are never whole: each unit's gradient goes
//           into one of two unit-sized buffers and is reduce-scattered into
//           this rank's part right after the unit's backward, every
//           micro-batch.
//   zero 3  (FSDP) parameters are not whole either: each unit is allgathered
//           into one of two unit-sized buffers just before use (the next
//           unit's gather prefetched), in forward and again in backward
//           (except the untied embedding, whose backward reads no weights).
// With tie_embeddings under zero 2/3 the embedding, which the head reads
// too, has buffers of its own that live through the pass.
//
// comm.overlap = false waits for each collective where it is launched (zero
// 0/1: every reduction launched after the backward; zero 1/2: the replica
// gathered before params_updated returns; zero 3: no prefetch),
// the baseline for the overlap benchmark. Time spent launching, polling and waiting is charged to the
// "comm/" phase timers (exposed communication).
#include <array>
#include <cstdint>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/reduction.hpp"
#include "core/types.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"
#include "model/unit_hooks.hpp"
#include "model/weights.hpp"
#include "parallel/data_group.hpp"
#include "parallel/shard_layout.hpp"

namespace exa::deck {
class Config;
}

namespace exa::parallel {

struct DataParallelOptions {
  int zero = 0;
  bool hierarchical = false;
  bool overlap = true;
  double bucket_bytes = 25.0 * 1024 * 1024;
  comm::Backend backend = comm::Backend::Mpi;
  // parallel.zero, parallel.hierarchical, comm.overlap, comm.bucket_mb, comm.backend.
  static DataParallelOptions from_deck(const deck::Config& cfg);
};

// Bytes on this rank, by the engine's own accounting.
struct DataParallelMemory {
  double params = 0;   // master values (+ the whole working replica for zero 1/2)
  double grads = 0;    // master gradients (+ the whole working gradient for zero 1)
  double buffers = 0;  // unit buffers (zero 2/3 gathered parameters and unit gradients), receive/staging
};

class DataParallel final : public model::UnitHooks {
 public:
  using Flat = View1<float>;

  DataParallel(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg, DataParallelOptions opt);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return group_.size(); }
  int rank() const { return group_.rank(); }
  const DataParallelOptions& options() const { return opt_; }
  const ShardLayout& layout() const { return layout_; }
  DataGroup& group() { return group_; }

  model::ParameterStore& store() { return store_; }
  const model::ParameterStore& store() const { return store_; }
  const model::Weights<float, Device>& weights() const { return w_; }
  const model::Weights<float, Device>& grads() const { return g_; }

  // Philox init of the master parts, then params_updated().
  void initialize(std::uint64_t seed);
  // The master values changed (init, checkpoint load, optimizer step): bring
  // the working copies up to date (zero 1/2 allgather; zero 3 drops what it
  // has gathered).
  void params_updated();

  void begin_step();
  void set_sync(bool sync) { sync_ = sync; }
  // Every reduction of the step done: store().grads() holds the mean over
  // the data-parallel ranks of this rank's part of the gradient.
  void finish_gradients();
  // Sum over the ranks whose parts make up the model once (GradClipper).
  Reduction norm_reduction();

  double sum(double x) { return group_.sum(x); }
  std::int64_t sum(std::int64_t x) { return group_.sum(x); }

  DataParallelMemory memory() const;

  // model::UnitHooks
  void before_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  static constexpr int kSlots = 3;  // two alternating unit buffers, and the tied embedding's own
  // DataGroup channels (one operation in flight each): gathers into slot s
  // use channel s, reductions from slot s channel kSlots + s, buckets and the
  // zero 1/2 parameter allgathers the kInFlight channels after those.
  static constexpr int kInFlight = 4;
  static constexpr int kFirstBulkChannel = 2 * kSlots;
  static constexpr int kChannels = kFirstBulkChannel + kInFlight;
  int slot_of(int unit) const { return tied_ && unit == 0 ? 2 : unit % 2; }
  int head() const { return layout_.size() - 1; }
  Flat part_values(int unit) const;
  Flat part_grads(int unit) const;
  Flat padded(const Flat& whole, int unit) const;  // a unit's padded range of a whole-model buffer
  Flat slot_range(const Flat& slot, int unit) const;
  void progress();
  // zero 3
  comm::Request gather(int unit, const Flat& dst, const Flat& staging, int channel);
  void ensure_params(int unit);
  void prefetch(int unit);
  void drop_gathered();
  // zero 2/3
  void prepare_grads(int unit);
  void reduce_grads(int unit);
  // zero 0/1
  void launch_bucket(std::int64_t lo, std::int64_t hi);
  void bucket_unit_ready(int unit);
  // zero 1
  void reduce_part(int unit);
  // zero 1/2: the replica's allgather after a step
  void launch_replica(int unit);
  void ensure_replica(int unit);
  void finish_replica();

  DataParallelOptions opt_;
  model::ModelConfig mcfg_;
  DataGroup group_;
  ShardLayout layout_;
  bool tied_ = false;
  model::ParameterStore store_;
  model::Weights<float, Device> w_, g_;
  bool sync_ = true;

  Flat work_params_, work_grads_;  // whole padded replicas (zero 1/2 params, zero 1 grads)
  std::array<Flat, kSlots> param_slot_, grad_slot_, recv_, staging_;
  // zero 1/2: a block per bulk channel, for the one operation in flight on
  // it (zero 1's reduce-scatter receives into it, the replica's allgather
  // pads a short part in it).
  std::array<Flat, kInFlight> bulk_block_;
  std::array<int, kSlots> slot_unit_{{-1, -1, -1}};
  std::array<comm::Request, kSlots> gather_req_, reduce_req_;
  std::vector<comm::Request> buckets_;
  std::int64_t bucket_hi_ = 0;  // zero 0: grads at [bucket_hi_, end) are launched
  int next_part_ = 0;           // zero 1: units next_part_ .. 0 are not reduced yet
  // zero 1/2: units [0, replica_done_) of the replica are up to date, units
  // [replica_done_, replica_next_) are being gathered (one per bulk channel).
  std::vector<comm::Request> replica_req_;
  int replica_next_ = 0, replica_done_ = 0;
};

}  // namespace exa::parallel
