#include "parallel/data_parallel.hpp"

#include <algorithm>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"

namespace exa::parallel {

namespace {

using Flat = DataParallel::Flat;

Flat range(const Flat& v, std::int64_t lo, std::int64_t n) {
  return Kokkos::subview(v, Kokkos::make_pair(std::size_t(lo), std::size_t(lo + n)));
}

Flat alloc(const char* name, std::int64_t n) { return Flat(std::string(name), static_cast<std::size_t>(n)); }

void scale(const Flat& v, float s) {
  Kokkos::parallel_for(
      "exa::dp_scale", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { v(i) *= s; });
}

// dst += src[0, dst.extent(0)). A free function: CUDA's extended lambdas
// cannot live inside the host lambda that runs it on completion.
void accumulate(const Flat& dst, const Flat& src) {
  Kokkos::parallel_for(
      "exa::dp_accumulate", Kokkos::RangePolicy<ExecSpace>(0, dst.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { dst(i) += src(i); });
}

double bytes(const Flat& v) { return double(v.span() * sizeof(float)); }

}  // namespace

DataParallelOptions DataParallelOptions::from_deck(const deck::Config& cfg) {
  DataParallelOptions o;
  o.zero = static_cast<int>(cfg.get_int("parallel.zero"));
  o.hierarchical = cfg.get_bool("parallel.hierarchical");
  o.overlap = cfg.get_bool("comm.overlap");
  o.bucket_bytes = cfg.get_float("comm.bucket_mb") * 1024.0 * 1024.0;
  o.backend = cfg.get_string("comm.backend") == "nccl" ? comm::Backend::Nccl : comm::Backend::Mpi;
  return o;
}

DataParallel::DataParallel(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg, DataParallelOptions opt)
    : opt_(opt),
      mcfg_(mcfg),
      group_(grid, opt.hierarchical, kChannels, opt.backend),
      layout_(model::parameter_specs(mcfg), mcfg.n_layers, opt.zero > 0 ? group_.size() : 1,
              opt.zero > 0 ? group_.block_index() : 0),
      tied_(mcfg.tie_embeddings),
      store_(model::parameter_specs(mcfg), opt.zero > 0 ? layout_.shards()
                                                        : model::whole_shards(model::parameter_specs(mcfg))) {
  EXA_REQUIRE(opt_.zero >= 0 && opt_.zero <= 3, "parallel.zero = {} does not exist; use 0, 1, 2 or 3", opt_.zero);
  const int z = opt_.zero;
  // Where each tensor of the working copies lives: a unit's slot buffer or
  // its place in a whole padded buffer.
  auto in_whole = [&](const Flat& buf) {
    return [this, buf](const model::ParamSpec& s) {
      const std::size_t i = store_.index(s.name);
      return buf.data() + layout_.unit(layout_.unit_of_spec(i)).work_offset + layout_.offset_in_unit(i);
    };
  };
  auto in_slots = [&](const std::array<Flat, kSlots>& slots) {
    return [this, slots](const model::ParamSpec& s) {
      const std::size_t i = store_.index(s.name);
      return slots[static_cast<std::size_t>(slot_of(layout_.unit_of_spec(i)))].data() + layout_.offset_in_unit(i);
    };
  };
  // Slots 0 and 1 take the largest unit they will hold (not the tied
  // embedding, which has slot 2).
  std::int64_t alternating = 0;
  for (int u = tied_ ? 1 : 0; u < layout_.size(); ++u) alternating = std::max(alternating, layout_.unit(u).padded);
  auto unit_slots = [&](const char* name) {
    std::array<Flat, kSlots> s;
    s[0] = alloc(name, alternating);
    s[1] = alloc(name, alternating);
    if (tied_) s[2] = alloc(name, layout_.unit(0).padded);
    return s;
  };
  if (z >= 2) {
    grad_slot_ = unit_slots("exa::dp::grad_slot");
    for (int s = 0; s < kSlots; ++s)
      if (grad_slot_[s].extent(0) > 0) recv_[s] = alloc("exa::dp::recv", layout_.max_block());
  }
  if (z == 3) {
    param_slot_ = unit_slots("exa::dp::param_slot");
    for (int s = 0; s < kSlots; ++s)
      if (param_slot_[s].extent(0) > 0) staging_[s] = alloc("exa::dp::staging", layout_.max_block());
  }
  if (z == 1 || z == 2) work_params_ = alloc("exa::dp::params", layout_.padded_total());
  replica_req_.resize(std::size_t(layout_.size()));
  replica_next_ = replica_done_ = layout_.size();
  if (z == 1) work_grads_ = alloc("exa::dp::grads", layout_.padded_total());
  if (z == 1 || z == 2)
    for (auto& b : bulk_block_) b = alloc("exa::dp::bulk_block", layout_.max_block());

  switch (z) {
    case 0:
      w_ = model::bind_values(mcfg_, store_);
      g_ = model::bind_grads(mcfg_, store_);
      break;
    case 1:
      w_ = model::bind_weights<float, Device>(mcfg_, in_whole(work_params_));
      g_ = model::bind_weights<float, Device>(mcfg_, in_whole(work_grads_));
      break;
    case 2:
      w_ = model::bind_weights<float, Device>(mcfg_, in_whole(work_params_));
      g_ = model::bind_weights<float, Device>(mcfg_, in_slots(grad_slot_));
      break;
    default:
      w_ = model::bind_weights<float, Device>(mcfg_, in_slots(param_slot_));
      g_ = model::bind_weights<float, Device>(mcfg_, in_slots(grad_slot_));
      break;
  }
  if (group_.size() > 1 || z > 0)
    log::info("data parallel: dp {}, zero {}, {}, gradient {}{}", group_.size(), z, group_.describe(),
              z >= 1 ? "reduce-scatter per unit" : "allreduce in buckets of ",
              z >= 1 ? std::string() : fmt::format("{:.1f} MiB", opt_.bucket_bytes / 1048576.0),
              opt_.overlap ? ", overlapped with backward" : ", after backward (comm.overlap = false)");
}

DataParallel::~DataParallel() {
  // Requests in flight reference the buffers: let them finish first.
  try {
    for (auto& r : gather_req_) r.wait();
    for (auto& r : reduce_req_) r.wait();
    for (auto& r : buckets_) r.wait();
    for (auto& r : replica_req_) r.wait();
  } catch (...) {
  }
}

Flat DataParallel::part_values(int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(store_.values(), u.local_offset, u.local_count);
}

Flat DataParallel::part_grads(int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(store_.grads(), u.local_offset, u.local_count);
}

Flat DataParallel::padded(const Flat& whole, int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(whole, u.work_offset, u.padded);
}

Flat DataParallel::slot_range(const Flat& slot, int unit) const { return range(slot, 0, layout_.unit(unit).padded); }

void DataParallel::progress() {
  for (auto& r : gather_req_) DataGroup::test(r);
  for (auto& r : reduce_req_) DataGroup::test(r);
  for (auto& r : buckets_) DataGroup::test(r);
  for (int u = replica_done_; u < replica_next_; ++u) DataGroup::test(replica_req_[std::size_t(u)]);
}

void DataParallel::initialize(std::uint64_t seed) {
  store_.initialize(seed);
  params_updated();
}

comm::Request DataParallel::gather(int unit, const Flat& dst, const Flat& staging, int channel) {
  const Unit& u = layout_.unit(unit);
  Flat src = part_values(unit);
  if (u.local_count < u.block) {
    // The last parts of a unit are short: pad them to a whole block.
    Flat pad = range(staging, 0, u.block);
    Kokkos::deep_copy(pad, 0.0f);
    Kokkos::deep_copy(range(pad, 0, u.local_count), src);
    src = pad;
  }
  return group_.iallgather(src, dst, channel);
}

void DataParallel::params_updated() {
  if (opt_.zero == 0) return;
  if (opt_.zero == 3) {
    drop_gathered();
    return;
  }
  finish_replica();
  replica_next_ = replica_done_ = 0;
  while (replica_next_ < std::min(layout_.size(), kInFlight)) launch_replica(replica_next_++);
  // With overlap the units land during the next forward, each waited for
  // just before its first use (before_forward); without, here.
  if (!opt_.overlap) finish_replica();
}

void DataParallel::launch_replica(int unit) {
  // Unit k uses bulk channel k % kInFlight (and its block buffer to pad a
  // short part), whose previous user, unit k - kInFlight, is complete:
  // units are completed in order.
  const int ch = unit % kInFlight;
  replica_req_[std::size_t(unit)] =
      gather(unit, padded(work_params_, unit), bulk_block_[std::size_t(ch)], kFirstBulkChannel + ch);
}

void DataParallel::ensure_replica(int unit) {
  while (replica_done_ <= unit && replica_done_ < layout_.size()) {
    DataGroup::wait(replica_req_[std::size_t(replica_done_)]);
    ++replica_done_;
    if (replica_next_ < layout_.size()) launch_replica(replica_next_++);
  }
}

void DataParallel::finish_replica() { ensure_replica(layout_.size() - 1); }

void DataParallel::drop_gathered() {
  for (auto& r : gather_req_) DataGroup::wait(r);
  slot_unit_.fill(-1);
}

void DataParallel::ensure_params(int unit) {
  const int s = slot_of(unit);
  if (slot_unit_[s] != unit) {
    DataGroup::wait(gather_req_[s]);
    gather_req_[s] = gather(unit, slot_range(param_slot_[s], unit), staging_[s], s);
    slot_unit_[s] = unit;
  }
  DataGroup::wait(gather_req_[s]);
}

void DataParallel::prefetch(int unit) {
  if (!opt_.overlap || unit < 0 || unit > head()) return;
  const int s = slot_of(unit);
  if (slot_unit_[s] == unit) return;
  // The slot's previous unit is behind us in this pass.
  DataGroup::wait(gather_req_[s]);
  gather_req_[s] = gather(unit, slot_range(param_slot_[s], unit), staging_[s], s);
  slot_unit_[s] = unit;
}

void DataParallel::prepare_grads(int unit) {
  const int s = slot_of(unit);
  DataGroup::wait(reduce_req_[s]);  // the slot's previous unit must be reduced before it is reused
  Kokkos::deep_copy(slot_range(grad_slot_[s], unit), 0.0f);
}

void DataParallel::reduce_grads(int unit) {
  const int s = slot_of(unit);
  const Unit& u = layout_.unit(unit);
  const Flat recv = range(recv_[s], 0, u.block);
  reduce_req_[s] = group_.ireduce_scatter(slot_range(grad_slot_[s], unit), recv, kSlots + s);
  // Micro-batches accumulate into the master part as their reductions land.
  const Flat dst = part_grads(unit);
  reduce_req_[s].then([dst, recv]() { accumulate(dst, recv); });
  if (!opt_.overlap) DataGroup::wait(reduce_req_[s]);
}

void DataParallel::launch_bucket(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return;
  finish_replica();  // the bulk channels are free again (a forward has normally done this already)
  const std::size_t i = buckets_.size();
  if (i >= kInFlight) DataGroup::wait(buckets_[i - kInFlight]);  // frees its channel
  buckets_.push_back(group_.iallreduce(range(store_.grads(), lo, hi - lo), kFirstBulkChannel + int(i % kInFlight)));
}

void DataParallel::reduce_part(int unit) {
  // zero 1: the unit's accumulated gradient, reduce-scattered into the part
  // (zeroed by begin_step), the same traffic as half an allreduce.
  finish_replica();  // the bulk channels are free again (a forward has normally done this already)
  const std::size_t i = buckets_.size();
  const int ch = int(i % kInFlight);
  if (i >= kInFlight) DataGroup::wait(buckets_[i - kInFlight]);  // frees its channel and receive buffer
  const Flat recv = range(bulk_block_[std::size_t(ch)], 0, layout_.unit(unit).block);
  comm::Request r = group_.ireduce_scatter(padded(work_grads_, unit), recv, kFirstBulkChannel + ch);
  const Flat dst = part_grads(unit);
  r.then([dst, recv]() { accumulate(dst, recv); });
  buckets_.push_back(std::move(r));
  next_part_ = unit - 1;
}

void DataParallel::bucket_unit_ready(int unit) {
  const std::int64_t lo = layout_.unit(unit).work_offset;
  if (unit == 0 || double(bucket_hi_ - lo) * sizeof(float) >= opt_.bucket_bytes) {
    launch_bucket(lo, bucket_hi_);
    bucket_hi_ = lo;
  }
}

void DataParallel::begin_step() {
  for (auto& r : buckets_) DataGroup::wait(r);
  buckets_.clear();
  bucket_hi_ = layout_.padded_total();
  next_part_ = head();
  store_.zero_grads();
  if (work_grads_.extent(0) > 0) Kokkos::deep_copy(work_grads_, 0.0f);
  sync_ = true;
}

void DataParallel::before_forward(int unit) {
  if (opt_.zero == 1 || opt_.zero == 2) {
    progress();
    ensure_replica(unit);
    return;
  }
  if (opt_.zero != 3) return;
  progress();
  ensure_params(unit);
  if (tied_ && unit == head()) ensure_params(0);
  prefetch(unit + 1);
}

void DataParallel::before_backward(int unit) {
  if (opt_.zero < 2) return;
  progress();
  if (opt_.zero == 3) {
    // The embedding's backward reads no weights: untied, unit 0 is gathered
    // in backward only as a prefetch for the next micro-batch's forward.
    if (unit > 0 || tied_) ensure_params(unit);
    if (tied_ && unit == head()) ensure_params(0);
    if (unit > 1 || tied_ || !sync_) prefetch(unit - 1);
  }
  // A unit's gradient buffer is cleared by the first backward that writes
  // it: the head's backward writes the tied embedding's too.
  if (unit == head()) {
    prepare_grads(unit);
    if (tied_) prepare_grads(0);
  } else if (!(tied_ && unit == 0)) {
    prepare_grads(unit);
  }
}

void DataParallel::after_backward(int unit) {
  if (opt_.zero >= 2) {
    reduce_grads(unit);
    progress();
  } else if (opt_.zero == 1) {
    if (sync_ && opt_.overlap) {
      reduce_part(unit);
      progress();
    }
  } else if (sync_ && group_.size() > 1 && opt_.overlap) {
    bucket_unit_ready(unit);
    progress();
  }
}

void DataParallel::finish_gradients() {
  const float inv = 1.0f / float(group_.size());
  if (opt_.zero >= 2) {
    for (auto& r : reduce_req_) DataGroup::wait(r);
    if (group_.size() > 1) scale(store_.grads(), inv);
    Kokkos::fence();
    return;
  }
  if (opt_.zero == 1) {
    for (int u = next_part_; u >= 0; --u) reduce_part(u);  // those not launched during backward
  } else if (group_.size() > 1) {
    for (int u = head(); u >= 0 && bucket_hi_ > 0; --u)
      if (layout_.unit(u).work_offset < bucket_hi_) bucket_unit_ready(u);
  }
  for (auto& r : buckets_) DataGroup::wait(r);
  buckets_.clear();
  if (group_.size() > 1) scale(store_.grads(), inv);
  Kokkos::fence();
}

Reduction DataParallel::norm_reduction() {
  if (opt_.zero == 0) return {};  // replicas: every rank already has the whole norm
  return [this](double x) { return group_.sum(x); };
}

DataParallelMemory DataParallel::memory() const {
  DataParallelMemory m;
  m.params = bytes(store_.values()) + bytes(work_params_);
  m.grads = bytes(store_.grads()) + bytes(work_grads_);
  for (int s = 0; s < kSlots; ++s)
    m.buffers += bytes(param_slot_[s]) + bytes(grad_slot_[s]) + bytes(recv_[s]) + bytes(staging_[s]);
  for (const auto& b : bulk_block_) m.buffers += bytes(b);
  return m;
}

}  // namespace exa::parallel
