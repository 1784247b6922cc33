#pragma once
// train.grad_projection = "pcgrad" in the step (docs/architecture.md,
// "Gradient projection"): the step's micro-batches run in one round per
// task (micro-batch m is task m mod K's, io::StreamMixture's round-robin
// mode), each round's gradient reduced over the data group as a whole
// step's would be and kept here; then optim::project_conflicts combines
// them into the store's gradient, which the optimizer steps on as usual.
//
// Dot products of task gradients are global: a . b = (|a + b|^2 -
// |a - b|^2) / 4, each squared norm taken by the gradient clipper's own
// reduction (`global_sq_norm`) over the store's gradient buffer, so every
// layout's rule for counting parts once (tensor-parallel replicas, expert
// and ZeRO parts, pipeline stages) carries over unchanged.
//
// The weights: task t's gradient counts with K times its share of the
// streams' weights, so that with equal weights and no conflict the update
// is the unprojected step's.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/deck/config.hpp"
#include "io/stream_mixture.hpp"
#include "model/parameter_store.hpp"
#include "optim/gradient_projection.hpp"

namespace exa::train {

class GradProjection {
 public:
  // Reads train.grad_projection; when on, sets `data` to round-robin tasks.
  GradProjection(const deck::Config& cfg, io::StreamMixture& data);

  bool enabled() const { return on_; }
  int tasks() const { return int(weights_.size()); }
  // Keeps the reduced gradient of task t's round (the store's trainable
  // part) and its squared norm (the clipper's, over the store's buffer).
  void keep(int task, const model::ParameterStore& store, const std::function<double()>& global_sq_norm);
  // The store's trainable gradient becomes the projected combination.
  optim::ProjectionReport combine(std::int64_t step, model::ParameterStore& store,
                                  const std::function<double()>& global_sq_norm);
  // The task gradients and scratch this rank keeps (the memory ledger's
  // gradients: their labels start "exa::grads").
  double bytes() const;

 private:
  bool on_ = false;
  std::uint64_t seed_ = 0;
  std::vector<double> weights_;
  std::vector<double> sq_;  // |g_t|^2 of each kept task gradient
  std::vector<optim::GradPart> task_;
  optim::GradPart acc_, work_;
};

}  // namespace exa::train
