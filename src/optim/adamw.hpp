#pragma once
// AdamW on this rank's parameter slice, with fp32 master weights: the
// store's values() are the master weights and are updated in place.
//
// State: exp_avg and exp_avg_sq, two flat fp32 buffers laid out exactly as
// the store's values()/grads() (same length, same per-tensor local
// offsets), and one step counter. Sharding is therefore the store's
// business: a store narrowed to this rank's shard (ZeRO-1/2/3) gives an
// optimizer whose state covers only that shard, with no change here.
//
// The update is torch.optim.AdamW (amsgrad off), element for element, via
// kernels::adamw_step. Decoupled weight decay applies to the tensors whose
// ParamSpec has weight_decay (the matrices) and not to the norm gains, as two
// torch parameter groups would. Adjacent tensors with the same decay flag are
// updated in one kernel launch over their combined range (the update is
// element-wise, so this is bit-identical to one launch per tensor and takes
// ~4 launches per layer instead of ~11).
//
// The step counter counts applied updates; step() increments it first and
// uses it for bias correction (1-based, as torch's state["step"]). A skipped
// step (non-finite gradient) does not call step() and does not count.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/types.hpp"
#include "model/parameter_store.hpp"

namespace exa::deck {
class Config;
}

namespace exa::optim {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied only to ParamSpec::weight_decay tensors
  // memory.offload_optimizer: the moments of the store's offloaded tensors
  // live in its offload file too (core/offload_tier.hpp).
  bool offload_state = false;
  // optim.freeze_variance_step: exp_avg_sq stops updating after this many
  // updates (kernels/adamw.hpp); 0 = never.
  std::int64_t freeze_variance_step = 0;

  // optim.beta1, optim.beta2, optim.eps, optim.weight_decay,
  // optim.freeze_variance_step.
  static AdamWConfig from_deck(const deck::Config& cfg);
};

class AdamW {
 public:
  using Flat = View1<float>;

  // Zeroed state shaped like `store`'s local slices (the store's values are
  // not touched). exa::Error on an invalid config.
  explicit AdamW(const model::ParameterStore& store, AdamWConfig cfg = {});

  // One update of every local slice (an offloaded tensor's piece by piece:
  // each taken out of the resident set once updated, its values, gradients
  // and moments): step_count() += 1, then for each element
  // the AdamW update with learning rate `lr`, the gradient multiplied by
  // `grad_scale` first (GradClipper's ClipResult::grad_scale). `store` must be
  // the store this optimizer was built for (same slices); its grads are read,
  // its values updated.
  void step(model::ParameterStore& store, double lr, double grad_scale = 1.0);

  std::int64_t step_count() const { return step_; }
  void set_step_count(std::int64_t n);  // checkpoint restore
  const AdamWConfig& config() const { return cfg_; }

  // State of tensor i's local slice (flat; writable, for the checkpoint
  // reader), and the whole buffers.
  std::size_t size() const { return offsets_.size(); }
  Flat exp_avg(std::size_t i) const;
  Flat exp_avg_sq(std::size_t i) const;
  const Flat& exp_avg() const { return m_; }
  const Flat& exp_avg_sq() const { return v_; }
  // Zero the moments and the step counter.
  void reset();

  // Bytes of optimizer state on this rank (the two moment buffers).
  std::size_t bytes() const;
  // Kernel launches per step (merged runs of same-decay tensors).
  std::size_t launches_per_step() const { return segments_.size(); }

 private:
  struct Segment {
    std::int64_t offset, count;
    bool decay;
    bool offloaded = false;  // one offloaded tensor's piece of a run
  };
  // An offloaded piece updated: sampled for the ledger, then out of the
  // resident set.
  void release(const model::ParameterStore& store, ElementSpan s) const;

  AdamWConfig cfg_;
  std::int64_t step_ = 0;
  std::vector<std::int64_t> offsets_, counts_;
  std::vector<Segment> segments_;
  Flat m_, v_;
  std::shared_ptr<TieredBuffer> m_tier_, v_tier_;  // own m_/v_ under offload_state
};

}  // namespace exa::optim
