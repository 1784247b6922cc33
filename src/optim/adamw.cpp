#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/adamw.hpp"

namespace exa::optim {

AdamWConfig AdamWConfig::from_deck(const deck::Config& c) {
  AdamWConfig a;
  a.beta1 = c.get_float("optim.beta1");
  a.beta2 = c.get_float("optim.beta2");
  a.eps = c.get_float("optim.eps");
  a.weight_decay = c.get_float("optim.weight_decay");
  a.offload_state = c.get_bool("memory.offload_optimizer");
  a.freeze_variance_step = c.get_int("optim.freeze_variance_step");
  return a;
}

AdamW::AdamW(const model::ParameterStore& store, AdamWConfig cfg) : cfg_(cfg) {
  EXA_REQUIRE(cfg.beta1 >= 0.0 && cfg.beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got {}", cfg.beta1);
  EXA_REQUIRE(cfg.beta2 >= 0.0 && cfg.beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got {}", cfg.beta2);
  EXA_REQUIRE(cfg.eps > 0.0, "AdamW: eps must be > 0, got {}", cfg.eps);
  EXA_REQUIRE(cfg.weight_decay >= 0.0, "AdamW: weight_decay must be >= 0, got {}", cfg.weight_decay);
  EXA_REQUIRE(cfg.freeze_variance_step >= 0, "AdamW: freeze_variance_step must be >= 0, got {}",
              cfg.freeze_variance_step);
  // State for the trainable tensors only (the store's head); a frozen
  // tensor's is empty.
  store.require_trainable_first();
  for (std::size_t i = 0; i < store.size(); ++i) {
    const bool trains = store.spec(i).trainable;
    const std::int64_t off = trains ? store.local_offset(i) : store.trainable_numel(),
                       n = trains ? store.shard(i).count : 0;
    offsets_.push_back(off);
    counts_.push_back(n);
    if (n == 0) continue;
    const bool decay = store.spec(i).weight_decay;
    if (!segments_.empty() && segments_.back().decay == decay &&
        segments_.back().offset + segments_.back().count == off) {
      segments_.back().count += n;
    } else {
      segments_.push_back(Segment{off, n, decay});
    }
  }
  const auto total = static_cast<std::size_t>(store.trainable_numel());
  // Each offloaded tensor's piece of a run updates on its own, so that it
  // leaves the resident set before the next comes in (element-wise: the
  // same arithmetic as one launch).
  // The gradient tier's spans: the offloaded tensors' trainable elements.
  const std::vector<ElementSpan> spans = store.grad_tier() ? store.grad_tier()->spans() : std::vector<ElementSpan>{};
  if (!spans.empty()) {
    std::vector<Segment> cut;
    for (const auto& sg : segments_) {
      std::int64_t at = sg.offset;
      const std::int64_t end = sg.offset + sg.count;
      for (const auto& t : spans) {
        if (t.end <= at || t.begin >= end) continue;
        if (t.begin > at) cut.push_back(Segment{at, t.begin - at, sg.decay, false});
        const std::int64_t b = std::max(at, t.begin), e = std::min(end, t.end);
        cut.push_back(Segment{b, e - b, sg.decay, true});
        at = e;
      }
      if (at < end) cut.push_back(Segment{at, end - at, sg.decay, false});
    }
    segments_ = std::move(cut);
  }
  if (cfg.offload_state && !spans.empty()) {
    EXA_REQUIRE(store.offload_file() != nullptr, "AdamW: offloaded optimizer state needs an offloaded store");
    // The store's tier: a file on host builds, host memory on CUDA ones.
    // On CUDA the update below still runs on the device, reading and
    // writing the host-resident pieces in place: a host loop would round
    // differently from the device kernel (nvcc contracts multiply-adds),
    // and offload must not change a bit of the run.
    m_tier_ = std::make_shared<TieredBuffer>("exa::optim::exp_avg", std::int64_t(total), spans, store.offload_file());
    v_tier_ = std::make_shared<TieredBuffer>("exa::optim::exp_avg_sq", std::int64_t(total), spans,
                                             store.offload_file());
    m_ = Flat(m_tier_->data(), total);
    v_ = Flat(v_tier_->data(), total);
    return;
  }
  m_ = Flat("exa::optim::exp_avg", total);
  v_ = Flat("exa::optim::exp_avg_sq", total);
}

void AdamW::step(model::ParameterStore& store, double lr, double grad_scale) {
  EXA_ASSERT(store.size() == offsets_.size() && static_cast<std::size_t>(store.trainable_numel()) == m_.extent(0));
  for (std::size_t i = 0; i < offsets_.size(); ++i) {
    EXA_ASSERT(!store.spec(i).trainable || (store.local_offset(i) == offsets_[i] && store.shard(i).count == counts_[i]));
  }
  EXA_REQUIRE(std::isfinite(grad_scale), "AdamW: grad_scale is {}; a step with a non-finite gradient norm must be "
              "skipped, not applied", grad_scale);
  ScopedRegion region("exa::optim::adamw", /*fence=*/true);
  ++step_;
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = step_;
  h.grad_scale = grad_scale;
  h.variance_frozen_at = cfg_.freeze_variance_step;
  const Flat& p = store.values();
  const Flat& g = store.grads();
  for (const auto& s : segments_) {
    const auto r = Kokkos::make_pair(static_cast<std::size_t>(s.offset), static_cast<std::size_t>(s.offset + s.count));
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0;
    const Flat ps = Kokkos::subview(p, r), gs = Kokkos::subview(g, r), ms = Kokkos::subview(m_, r),
               vs = Kokkos::subview(v_, r);
    kernels::adamw_step(ps, gs, ms, vs, h);
    if (s.offloaded) release(store, ElementSpan{s.offset, s.offset + s.count});
  }
}

void AdamW::release(const model::ParameterStore& store, ElementSpan s) const {
  store.offload_file()->sample();
  store.value_tier()->release(s);
  store.grad_tier()->release(s);
  if (m_tier_) {
    m_tier_->release(s);
    v_tier_->release(s);
  }
}

void AdamW::set_step_count(std::int64_t n) {
  EXA_REQUIRE(n >= 0, "AdamW: step count must be >= 0, got {}", n);
  step_ = n;
}

AdamW::Flat AdamW::exp_avg(std::size_t i) const {
  const auto b = static_cast<std::size_t>(offsets_.at(i));
  return Kokkos::subview(m_, Kokkos::make_pair(b, b + static_cast<std::size_t>(counts_[i])));
}

AdamW::Flat AdamW::exp_avg_sq(std::size_t i) const {
  const auto b = static_cast<std::size_t>(offsets_.at(i));
  return Kokkos::subview(v_, Kokkos::make_pair(b, b + static_cast<std::size_t>(counts_[i])));
}

void AdamW::reset() {
  Kokkos::deep_copy(m_, 0.0f);
  Kokkos::deep_copy(v_, 0.0f);
  step_ = 0;
}

std::size_t AdamW::bytes() const { return (m_.extent(0) + v_.extent(0)) * sizeof(float); }

}  // namespace exa::optim
