#pragma once
// ZeroEngine: ZeRO stages 0-3 for the tensors that reduce over one group
// (docs/architecture.md, "Parallel layout"). DataParallel runs one engine
// over the Data group for every tensor, or, under expert parallelism, one
// for the Data-group tensors and one over the ExpertData group for the
// routed experts (each engine's units are the model's units restricted to
// its tensors, some of them empty).
//
// Stages (P ranks of the group):
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
//           (except the untied embedding, whose backward reads no weights),
//           and before a checkpoint segment's recomputed forward.
// With tie_embeddings under zero 2/3 the embedding, which the head reads
// too, has buffers of its own that live through the pass. The two
// alternating buffers go to the engine's non-empty units in turn.
//
// comm.overlap = false waits for each collective where it is launched (zero
// 0/1: every reduction launched after the backward; zero 1/2: the replica
// gathered before params_updated returns; zero 3: no prefetch), the
// baseline for the overlap benchmark. Time spent launching, polling and
// waiting is charged to the "comm/" phase timers (exposed communication).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/types.hpp"
#include "model/parameter_store.hpp"
#include "parallel/data/data_group.hpp"
#include "parallel/data/shard_layout.hpp"

namespace exa::parallel::data {

struct ZeroEngineConfig {
  int zero = 0;
  bool overlap = true;
  double bucket_bytes = 25.0 * 1024 * 1024;
  bool tied = false;           // the embedding is also the head (its buffers live through the pass)
  double grad_divisor = 1.0;   // gradients are divided by it once reduced (the data-parallel size)
  // The tensors are frozen (LoRA's base model): their parameters are
  // gathered as the stage says; they have no gradient buffers (work_grad is
  // null, the model skips their weight gradients) and nothing to reduce.
  bool frozen = false;
  // Unit 0's backward reads its parameters (LoRA's embedding adapters);
  // the untied table's own backward reads none.
  bool embedding_backward_reads = false;
  // This stage runs the embedding. A last pipeline stage holds the tied
  // table for its head only: the table's gradient is complete after the
  // head's backward, and is reduced then.
  bool embedding_here = true;
  // This stage runs the head. A first pipeline stage holds the tied table
  // for its embedding only: the embedding's backward is the first to write
  // its gradient.
  bool head_here = true;
  // zero 2/3 under the zb schedule: weight gradients deferred past a unit's
  // backward get buffers of their own (two, alternating, and a channel
  // each), reduce-scattered into the part when W is done with them.
  bool deferred = false;
};

class ZeroEngine {
 public:
  using Flat = View1<float>;

  // `store` holds this engine's tensors (layout's specs) as one contiguous
  // run of its flat buffers starting at `store_base`.
  ZeroEngine(DataGroup group, ShardLayout layout, model::ParameterStore& store, std::int64_t store_base,
             ZeroEngineConfig cfg);
  ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  DataGroup& group() { return group_; }
  const ShardLayout& layout() const { return layout_; }
  bool frozen() const { return cfg_.frozen; }
  bool deferred() const { return deferred_slot_[0].extent(0) > 0; }
  bool holds(const std::string& name) const { return spec_of_.count(name) != 0; }
  // Where the model reads tensor `name`'s working copy / writes its gradient
  // (zero >= 1; zero 0 binds the store itself; null for a frozen engine's
  // gradient).
  float* work_value(const std::string& name) const;
  float* work_grad(const std::string& name) const;

  void params_updated();
  // zero 1/2: waits until the replica's allgather after a step has landed
  // (the forward normally waits unit by unit); nothing for zero 0 and 3.
  void complete_replica();
  void begin_step();
  void set_sync(bool sync) { sync_ = sync; }
  void finish_gradients();
  double buffer_bytes() const;  // unit buffers, receive/staging, whole working copies, top-k residuals
  // Top-k's error feedback (comm.compression = "topk", over more than one
  // rank): what this rank still owes of tensor `name`'s gradient, the
  // rank's whole box of it in row-major order (under every ZeRO stage: the
  // reductions send whole units). Empty otherwise.
  bool has_residuals() const { return residual_.extent(0) > 0; }
  Flat residual(const std::string& name) const;
  void scale_residuals(float s);
  double work_param_bytes() const;
  double work_grad_bytes() const;

  void before_forward(int unit);
  void before_backward(int unit);
  // zero 3: a segment's recomputation reads the unit's weights ahead of its
  // backward (gathered now, into its slot; its backward gathers it again
  // if the slot was reused in between).
  void before_recompute(int unit);
  void after_backward(int unit);

  // Deferred weight gradients (cfg.deferred; parallel/pipeline/
  // gradient_home.hpp). Whether `grad` lies in a unit gradient buffer, and
  // then the unit in it now and the offset; a zeroed buffer for a run of
  // the unit's deferred products; that run reduce-scattered into the part.
  bool locate_grad(const float* grad, int& unit, std::ptrdiff_t& offset) const;
  float* open_deferred(int unit);
  void close_deferred(int unit);

 private:
  static constexpr int kSlots = 3;  // two alternating unit buffers, and the tied embedding's own
  // DataGroup channels (one operation in flight each): gathers into slot s
  // use channel s, reductions from slot s channel kSlots + s, buckets and the
  // zero 1/2 parameter allgathers the kInFlight channels after those.
  static constexpr int kInFlight = 4;
  static constexpr int kFirstBulkChannel = 2 * kSlots;

 public:
  static constexpr int kChannels = kFirstBulkChannel + kInFlight;
  static constexpr int kDeferred = 2;  // cfg.deferred's buffers, and their channels after kChannels
  static int channels(bool deferred) { return kChannels + (deferred ? kDeferred : 0); }

 private:
  bool empty(int unit) const { return layout_.unit(unit).numel == 0; }
  int slot_of(int unit) const { return slot_[std::size_t(unit)]; }
  int head() const { return layout_.size() - 1; }
  int next_unit(int unit) const;  // the next / previous non-empty unit, -1 when none
  int prev_unit(int unit) const;
  Flat part_values(int unit) const;
  Flat part_grads(int unit) const;
  Flat own(const Flat& store_buffer) const;  // this engine's run of the store's flat buffer
  Flat padded(const Flat& whole, int unit) const;  // a unit's padded range of a whole-model buffer
  Flat slot_range(const Flat& slot, int unit) const;
  Flat residual_of(int unit) const;  // the unit's padded range of the residuals (empty without)
  void progress();
  comm::Request gather(int unit, const Flat& dst, const Flat& staging, int channel);
  // zero 3
  void ensure_params(int unit);
  void prefetch(int unit);
  void drop_gathered();
  // zero 2/3
  void prepare_grads(int unit);
  void reduce_grads(int unit);
  // zero 0
  void launch_bucket(std::int64_t lo, std::int64_t hi);
  void bucket_unit_ready(int unit);
  // zero 1
  void reduce_part(int unit);
  // zero 1/2: the replica's allgather after a step
  void launch_replica(int unit);
  void ensure_replica(int unit);
  void finish_replica();

  ZeroEngineConfig cfg_;
  DataGroup group_;
  ShardLayout layout_;
  model::ParameterStore& store_;
  std::int64_t base_ = 0;
  std::unordered_map<std::string, std::size_t> spec_of_;  // name -> the layout's spec index
  std::vector<int> slot_;
  bool sync_ = true;

  Flat work_params_, work_grads_;  // whole padded replicas (zero 1/2 params, zero 1 grads)
  Flat residual_;                  // top-k: the padded layout's error feedback
  std::array<Flat, kSlots> param_slot_, grad_slot_, recv_, staging_;
  // zero 1/2: a block per bulk channel, for the one operation in flight on
  // it (zero 1's reduce-scatter receives into it, the replica's allgather
  // pads a short part in it).
  std::array<Flat, kInFlight> bulk_block_;
  std::array<int, kSlots> slot_unit_{{-1, -1, -1}};
  std::array<int, kSlots> grad_unit_{{-1, -1, -1}};  // zero 2/3: the unit whose gradient the slot holds
  // cfg.deferred: W's buffers, their receive blocks and reductions, the
  // unit each holds, and the one to open next.
  std::array<Flat, kDeferred> deferred_slot_, deferred_recv_;
  std::array<comm::Request, kDeferred> deferred_req_;
  std::array<int, kDeferred> deferred_unit_{{-1, -1}};
  int deferred_next_ = 0;
  std::array<comm::Request, kSlots> gather_req_, reduce_req_;
  std::vector<comm::Request> buckets_;
  std::int64_t bucket_hi_ = 0;  // zero 0: grads at [bucket_hi_, end) are launched
  int next_part_ = 0;           // zero 1: units next_part_ .. 0 are not reduced yet
  // zero 1/2: units [0, replica_done_) of the replica are up to date, units
  // [replica_done_, replica_next_) are being gathered (one per bulk channel).
  std::vector<comm::Request> replica_req_;
  int replica_next_ = 0, replica_done_ = 0;
};

}  // namespace exa::parallel::data
