#include "parallel/data/zero_engine.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "parallel/data/flat_buffer.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::data {

namespace {

using Flat = ZeroEngine::Flat;

using flat::range;
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

using flat::bytes;

}  // namespace

ZeroEngine::ZeroEngine(DataGroup group, ShardLayout layout, model::ParameterStore& store, std::int64_t store_base,
                       ZeroEngineConfig cfg)
    : cfg_(cfg), group_(std::move(group)), layout_(std::move(layout)), store_(store), base_(store_base) {
  EXA_REQUIRE(cfg_.zero >= 0 && cfg_.zero <= 3, "parallel.zero = {} does not exist; use 0, 1, 2 or 3", cfg_.zero);
  const int z = cfg_.zero;
  for (std::size_t i = 0; i < layout_.specs().size(); ++i) spec_of_[layout_.specs()[i].name] = i;
  // The alternating slots go to the non-empty units in turn; the tied
  // embedding has slot 2.
  slot_.assign(std::size_t(layout_.size()), 0);
  int k = 0;
  for (int u = 0; u < layout_.size(); ++u) {
    if (cfg_.tied && u == 0) {
      slot_[0] = 2;
    } else if (!empty(u)) {
      slot_[std::size_t(u)] = k++ % 2;
    }
  }
  // Slots 0 and 1 take the largest unit they will hold.
  std::int64_t alternating = 0;
  for (int u = cfg_.tied ? 1 : 0; u < layout_.size(); ++u) alternating = std::max(alternating, layout_.unit(u).padded);
  auto unit_slots = [&](const char* name) {
    std::array<Flat, kSlots> s;
    s[0] = alloc(name, alternating);
    s[1] = alloc(name, alternating);
    if (cfg_.tied) s[2] = alloc(name, layout_.unit(0).padded);
    return s;
  };
  if (z >= 2 && !cfg_.frozen) {
    grad_slot_ = unit_slots("exa::dp::grad_slot");
    for (int s = 0; s < kSlots; ++s)
      if (grad_slot_[s].extent(0) > 0) recv_[s] = alloc("exa::dp::recv", layout_.max_block());
  }
  if (z >= 2 && !cfg_.frozen && cfg_.deferred) {
    // Any unit but the tied embedding (no Linear seam writes it).
    for (int d = 0; d < kDeferred; ++d) {
      deferred_slot_[std::size_t(d)] = alloc("exa::dp::deferred_grad", alternating);
      deferred_recv_[std::size_t(d)] = alloc("exa::dp::deferred_recv", layout_.max_block());
    }
  }
  if (z == 3) {
    param_slot_ = unit_slots("exa::dp::param_slot");
    for (int s = 0; s < kSlots; ++s)
      if (param_slot_[s].extent(0) > 0) staging_[s] = alloc("exa::dp::staging", layout_.max_block());
  }
  if (z == 1 || z == 2) work_params_ = alloc("exa::dp::params", layout_.padded_total());
  replica_req_.resize(std::size_t(layout_.size()));
  replica_next_ = replica_done_ = layout_.size();
  if (z == 1 && !cfg_.frozen) work_grads_ = alloc("exa::dp::grads", layout_.padded_total());
  if (z == 1 || z == 2)
    for (auto& b : bulk_block_) b = alloc("exa::dp::bulk_block", layout_.max_block());
  // Every reduction sends a range of the padded layout (zero 0's buckets,
  // zero 1's units, zero 2/3's unit slots), so one buffer of it holds the
  // residuals of all of them.
  if (group_.sparse() && group_.size() > 1 && !cfg_.frozen)
    residual_ = alloc("exa::dp::topk_residual", layout_.padded_total());
}

Flat ZeroEngine::residual(const std::string& name) const {
  if (!has_residuals()) return {};
  const std::size_t i = spec_of_.at(name);
  const int u = layout_.unit_of_spec(i);
  const std::int64_t at = layout_.offset_in_unit(i);
  const bool last = i + 1 == layout_.specs().size() || layout_.unit_of_spec(i + 1) != u;
  const std::int64_t end = last ? layout_.unit(u).numel : layout_.offset_in_unit(i + 1);
  return range(residual_, layout_.unit(u).work_offset + at, end - at);
}

void ZeroEngine::scale_residuals(float s) {
  if (!has_residuals()) return;
  if (s == 0.0f) {
    Kokkos::deep_copy(residual_, 0.0f);  // NaN and inf too
  } else if (s != 1.0f) {
    scale(residual_, s);
  }
}

ZeroEngine::~ZeroEngine() {
  // Requests in flight reference the buffers: let them finish first.
  try {
    for (auto& r : gather_req_) r.wait();
    for (auto& r : reduce_req_) r.wait();
    for (auto& r : deferred_req_) r.wait();
    for (auto& r : buckets_) r.wait();
    for (auto& r : replica_req_) r.wait();
  } catch (...) {
  }
}

float* ZeroEngine::work_value(const std::string& name) const {
  const std::size_t i = spec_of_.at(name);
  const int u = layout_.unit_of_spec(i);
  const Flat& buf = cfg_.zero == 3 ? param_slot_[std::size_t(slot_of(u))] : work_params_;
  const std::int64_t at = cfg_.zero == 3 ? 0 : layout_.unit(u).work_offset;
  return buf.data() + at + layout_.offset_in_unit(i);
}

float* ZeroEngine::work_grad(const std::string& name) const {
  if (cfg_.frozen) return nullptr;
  const std::size_t i = spec_of_.at(name);
  const int u = layout_.unit_of_spec(i);
  if (cfg_.zero == 1) return work_grads_.data() + layout_.unit(u).work_offset + layout_.offset_in_unit(i);
  return grad_slot_[std::size_t(slot_of(u))].data() + layout_.offset_in_unit(i);
}

int ZeroEngine::next_unit(int unit) const {
  for (int u = unit + 1; u < layout_.size(); ++u)
    if (!empty(u)) return u;
  return -1;
}

int ZeroEngine::prev_unit(int unit) const {
  for (int u = unit - 1; u >= 0; --u)
    if (!empty(u)) return u;
  return -1;
}

Flat ZeroEngine::part_values(int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(store_.values(), base_ + u.local_offset, u.local_count);
}

Flat ZeroEngine::part_grads(int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(store_.grads(), base_ + u.local_offset, u.local_count);
}

Flat ZeroEngine::own(const Flat& store_buffer) const { return range(store_buffer, base_, layout_.local_numel()); }

Flat ZeroEngine::padded(const Flat& whole, int unit) const {
  const Unit& u = layout_.unit(unit);
  return range(whole, u.work_offset, u.padded);
}

Flat ZeroEngine::residual_of(int unit) const { return has_residuals() ? padded(residual_, unit) : Flat(); }

Flat ZeroEngine::slot_range(const Flat& slot, int unit) const { return range(slot, 0, layout_.unit(unit).padded); }

void ZeroEngine::progress() {
  for (auto& r : gather_req_) DataGroup::test(r);
  for (auto& r : reduce_req_) DataGroup::test(r);
  for (auto& r : deferred_req_) DataGroup::test(r);
  for (auto& r : buckets_) DataGroup::test(r);
  for (int u = replica_done_; u < replica_next_; ++u) DataGroup::test(replica_req_[std::size_t(u)]);
}

comm::Request ZeroEngine::gather(int unit, const Flat& dst, const Flat& staging, int channel) {
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

void ZeroEngine::params_updated() {
  if (cfg_.zero == 0) return;
  if (cfg_.zero == 3) {
    drop_gathered();
    return;
  }
  finish_replica();
  replica_next_ = replica_done_ = 0;
  while (replica_next_ < std::min(layout_.size(), kInFlight)) launch_replica(replica_next_++);
  // With overlap the units land during the next forward, each waited for
  // just before its first use (before_forward); without, here.
  if (!cfg_.overlap) finish_replica();
}

void ZeroEngine::launch_replica(int unit) {
  // Unit k uses bulk channel k % kInFlight (and its block buffer to pad a
  // short part), whose previous user, unit k - kInFlight, is complete:
  // units are completed in order.
  if (empty(unit)) return;
  const int ch = unit % kInFlight;
  replica_req_[std::size_t(unit)] =
      gather(unit, padded(work_params_, unit), bulk_block_[std::size_t(ch)], kFirstBulkChannel + ch);
}

void ZeroEngine::ensure_replica(int unit) {
  while (replica_done_ <= unit && replica_done_ < layout_.size()) {
    DataGroup::wait(replica_req_[std::size_t(replica_done_)]);
    ++replica_done_;
    if (replica_next_ < layout_.size()) launch_replica(replica_next_++);
  }
}

void ZeroEngine::finish_replica() { ensure_replica(layout_.size() - 1); }

void ZeroEngine::complete_replica() {
  if (cfg_.zero == 1 || cfg_.zero == 2) finish_replica();
}

void ZeroEngine::drop_gathered() {
  for (auto& r : gather_req_) DataGroup::wait(r);
  slot_unit_.fill(-1);
}

void ZeroEngine::ensure_params(int unit) {
  if (empty(unit)) return;
  const int s = slot_of(unit);
  if (slot_unit_[s] != unit) {
    DataGroup::wait(gather_req_[s]);
    gather_req_[s] = gather(unit, slot_range(param_slot_[s], unit), staging_[s], s);
    slot_unit_[s] = unit;
  }
  DataGroup::wait(gather_req_[s]);
}

void ZeroEngine::prefetch(int unit) {
  if (!cfg_.overlap || unit < 0 || unit > head() || empty(unit)) return;
  const int s = slot_of(unit);
  if (slot_unit_[s] == unit) return;
  // The slot's previous unit is behind us in this pass.
  DataGroup::wait(gather_req_[s]);
  gather_req_[s] = gather(unit, slot_range(param_slot_[s], unit), staging_[s], s);
  slot_unit_[s] = unit;
}

void ZeroEngine::prepare_grads(int unit) {
  if (empty(unit) || cfg_.frozen) return;
  const int s = slot_of(unit);
  DataGroup::wait(reduce_req_[s]);  // the slot's previous unit must be reduced before it is reused
  Kokkos::deep_copy(slot_range(grad_slot_[s], unit), 0.0f);
  grad_unit_[std::size_t(s)] = unit;
}

bool ZeroEngine::locate_grad(const float* grad, int& unit, std::ptrdiff_t& offset) const {
  if (grad == nullptr) return false;
  for (int s = 0; s < kSlots; ++s) {
    const Flat& b = grad_slot_[std::size_t(s)];
    if (b.extent(0) == 0 || grad < b.data() || grad >= b.data() + b.extent(0)) continue;
    unit = grad_unit_[std::size_t(s)];
    offset = grad - b.data();
    EXA_ASSERT(unit >= 0 && slot_of(unit) == s);
    return true;
  }
  return false;
}

float* ZeroEngine::open_deferred(int unit) {
  EXA_REQUIRE(deferred_slot_[0].extent(0) > 0,
              "ZeroEngine: a deferred weight gradient in an engine built without deferred buffers");
  const int d = deferred_next_;
  deferred_next_ = (d + 1) % kDeferred;
  DataGroup::wait(deferred_req_[std::size_t(d)]);  // its previous unit's reduction reads it
  EXA_ASSERT(layout_.unit(unit).padded <= std::int64_t(deferred_slot_[std::size_t(d)].extent(0)));
  Kokkos::deep_copy(slot_range(deferred_slot_[std::size_t(d)], unit), 0.0f);
  deferred_unit_[std::size_t(d)] = unit;
  return deferred_slot_[std::size_t(d)].data();
}

void ZeroEngine::close_deferred(int unit) {
  // The buffer opened last for the unit.
  const int d = (deferred_next_ + kDeferred - 1) % kDeferred;
  EXA_ASSERT(deferred_unit_[std::size_t(d)] == unit);
  const Flat recv = range(deferred_recv_[std::size_t(d)], 0, layout_.unit(unit).block);
  auto& req = deferred_req_[std::size_t(d)];
  req = group_.ireduce_scatter(slot_range(deferred_slot_[std::size_t(d)], unit), recv, kChannels + d,
                               residual_of(unit));
  const Flat dst = part_grads(unit);
  req.then([dst, recv]() { accumulate(dst, recv); });
  deferred_unit_[std::size_t(d)] = -1;
  if (!cfg_.overlap) DataGroup::wait(req);
}

void ZeroEngine::reduce_grads(int unit) {
  if (empty(unit)) return;
  const int s = slot_of(unit);
  const Unit& u = layout_.unit(unit);
  const Flat recv = range(recv_[s], 0, u.block);
  reduce_req_[s] = group_.ireduce_scatter(slot_range(grad_slot_[s], unit), recv, kSlots + s, residual_of(unit));
  // Micro-batches accumulate into the master part as their reductions land.
  const Flat dst = part_grads(unit);
  reduce_req_[s].then([dst, recv]() { accumulate(dst, recv); });
  if (!cfg_.overlap) DataGroup::wait(reduce_req_[s]);
}

void ZeroEngine::launch_bucket(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return;
  finish_replica();  // the bulk channels are free again (a forward has normally done this already)
  const std::size_t i = buckets_.size();
  if (i >= kInFlight) DataGroup::wait(buckets_[i - kInFlight]);  // frees its channel
  const Flat owed = has_residuals() ? range(residual_, lo, hi - lo) : Flat();
  buckets_.push_back(
      group_.iallreduce(range(store_.grads(), base_ + lo, hi - lo), kFirstBulkChannel + int(i % kInFlight), owed));
}

void ZeroEngine::reduce_part(int unit) {
  // zero 1: the unit's accumulated gradient, reduce-scattered into the part
  // (zeroed by begin_step), the same traffic as half an allreduce.
  if (empty(unit)) {
    next_part_ = unit - 1;
    return;
  }
  finish_replica();  // the bulk channels are free again (a forward has normally done this already)
  const std::size_t i = buckets_.size();
  const int ch = int(i % kInFlight);
  if (i >= kInFlight) DataGroup::wait(buckets_[i - kInFlight]);  // frees its channel and receive buffer
  const Flat recv = range(bulk_block_[std::size_t(ch)], 0, layout_.unit(unit).block);
  comm::Request r = group_.ireduce_scatter(padded(work_grads_, unit), recv, kFirstBulkChannel + ch, residual_of(unit));
  const Flat dst = part_grads(unit);
  r.then([dst, recv]() { accumulate(dst, recv); });
  buckets_.push_back(std::move(r));
  next_part_ = unit - 1;
}

void ZeroEngine::bucket_unit_ready(int unit) {
  const std::int64_t lo = layout_.unit(unit).work_offset;
  if (unit == 0 || double(bucket_hi_ - lo) * sizeof(float) >= cfg_.bucket_bytes) {
    launch_bucket(lo, bucket_hi_);
    bucket_hi_ = lo;
  }
}

void ZeroEngine::begin_step() {
  for (auto& r : buckets_) DataGroup::wait(r);
  buckets_.clear();
  bucket_hi_ = layout_.padded_total();
  next_part_ = head();
  if (!cfg_.frozen) store_.zero_grads(base_, layout_.local_numel());
  if (work_grads_.extent(0) > 0) Kokkos::deep_copy(work_grads_, 0.0f);
  sync_ = true;
}

void ZeroEngine::before_forward(int unit) {
  if (cfg_.zero == 1 || cfg_.zero == 2) {
    progress();
    ensure_replica(unit);
    return;
  }
  if (cfg_.zero != 3) return;
  progress();
  ensure_params(unit);
  if (cfg_.tied && unit == head()) ensure_params(0);
  prefetch(next_unit(unit));
}

void ZeroEngine::before_backward(int unit) {
  if (cfg_.zero < 2) return;
  progress();
  if (cfg_.zero == 3) {
    // The embedding's backward reads no weights: untied, unit 0 is gathered
    // in backward only as a prefetch for the next micro-batch's forward.
    const bool reads0 = cfg_.tied || cfg_.embedding_backward_reads;
    if (unit > 0 || reads0) ensure_params(unit);
    if (cfg_.tied && unit == head()) ensure_params(0);
    const int prev = prev_unit(unit);
    if (prev > 0 || reads0 || !sync_) prefetch(prev);
  }
  // A unit's gradient buffer is cleared by the first backward that writes
  // it: the head's backward writes the tied embedding's too (where the
  // stage runs the head).
  if (unit == head()) {
    prepare_grads(unit);
    if (cfg_.tied) prepare_grads(0);
  } else if (!(cfg_.tied && unit == 0 && cfg_.head_here)) {
    prepare_grads(unit);
  }
}

void ZeroEngine::before_recompute(int unit) {
  if (cfg_.zero != 3) return;
  progress();
  ensure_params(unit);
}

void ZeroEngine::after_backward(int unit) {
  if (cfg_.frozen) {
    if (cfg_.zero == 3) progress();
    return;
  }
  if (cfg_.zero >= 2) {
    reduce_grads(unit);
    if (cfg_.tied && !cfg_.embedding_here && unit == head()) reduce_grads(0);
    progress();
  } else if (cfg_.zero == 1) {
    if (sync_ && cfg_.overlap) {
      reduce_part(unit);
      progress();
    }
  } else if (sync_ && group_.size() > 1 && cfg_.overlap) {
    bucket_unit_ready(unit);
    progress();
  }
}

void ZeroEngine::finish_gradients() {
  // The mean over the data-parallel ranks, whatever group reduced these
  // tensors: an expert's gradient already sums the tokens of its EP group.
  if (cfg_.frozen) return;
  const float inv = float(1.0 / cfg_.grad_divisor);
  if (cfg_.zero >= 2) {
    for (auto& r : reduce_req_) DataGroup::wait(r);
    for (auto& r : deferred_req_) DataGroup::wait(r);
    if (cfg_.grad_divisor != 1.0) scale(own(store_.grads()), inv);
    Kokkos::fence();
    return;
  }
  if (cfg_.zero == 1) {
    for (int u = next_part_; u >= 0; --u) reduce_part(u);  // those not launched during backward
  } else if (group_.size() > 1) {
    for (int u = head(); u >= 0 && bucket_hi_ > 0; --u)
      if (layout_.unit(u).work_offset < bucket_hi_) bucket_unit_ready(u);
  }
  for (auto& r : buckets_) DataGroup::wait(r);
  buckets_.clear();
  if (cfg_.grad_divisor != 1.0) scale(own(store_.grads()), inv);
  Kokkos::fence();
}

double ZeroEngine::work_param_bytes() const { return bytes(work_params_); }
double ZeroEngine::work_grad_bytes() const { return bytes(work_grads_); }

double ZeroEngine::buffer_bytes() const {
  double b = 0;
  for (int s = 0; s < kSlots; ++s)
    b += bytes(param_slot_[s]) + bytes(grad_slot_[s]) + bytes(recv_[s]) + bytes(staging_[s]);
  for (const auto& x : bulk_block_) b += bytes(x);
  for (int d = 0; d < kDeferred; ++d) b += bytes(deferred_slot_[std::size_t(d)]) + bytes(deferred_recv_[std::size_t(d)]);
  b += bytes(residual_);
  return b;
}

}  // namespace exa::parallel::data
