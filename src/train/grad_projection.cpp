#include "train/grad_projection.hpp"

#include "core/error.hpp"

namespace exa::train {

GradProjection::GradProjection(const deck::Config& cfg, io::StreamMixture& data)
    : on_(cfg.get_string("train.grad_projection") == "pcgrad"),
      seed_(static_cast<std::uint64_t>(cfg.get_int("train.seed"))) {
  if (!on_) return;
  data.assign_tasks_round_robin();
  const auto K = data.tasks().size();
  for (std::size_t t = 0; t < K; ++t) weights_.push_back(double(K) * data.task_weight(t));
  sq_.assign(K, 0.0);
}

void GradProjection::keep(int task, const model::ParameterStore& store, const std::function<double()>& global_sq_norm) {
  const auto g = store.trainable_grads();
  const std::size_t n = g.extent(0);
  if (task_.size() != weights_.size() || acc_.extent(0) != n) {  // first step, or the model grew
    task_.clear();
    for (int t = 0; t < tasks(); ++t) task_.emplace_back("exa::grads::pcgrad_task", n);
    acc_ = optim::GradPart("exa::grads::pcgrad_sum", n);
    work_ = optim::GradPart("exa::grads::pcgrad_work", n);
  }
  Kokkos::deep_copy(task_[std::size_t(task)], g);
  sq_[std::size_t(task)] = global_sq_norm();  // while the gradient is in the store
}

optim::ProjectionReport GradProjection::combine(std::int64_t step, model::ParameterStore& store,
                                                const std::function<double()>& global_sq_norm) {
  EXA_REQUIRE(task_.size() == weights_.size(), "gradient projection: combine() before every task's keep()");
  const auto g = store.trainable_grads();
  auto sq = [&](const optim::GradPart& x, double sign, const optim::GradPart& y) {
    optim::axpbyz(sign, y, 1.0, x, g);  // g = x + sign y
    Kokkos::fence();
    return global_sq_norm();
  };
  // (the squared norms came with keep(), so a and b are two gradients)
  const optim::GlobalDot dot = [&](const optim::GradPart& a, const optim::GradPart& b) {
    return (sq(a, 1.0, b) - sq(a, -1.0, b)) / 4.0;
  };
  const auto rep = optim::project_conflicts(task_, weights_, seed_, step, acc_, work_, dot, sq_);
  Kokkos::deep_copy(g, acc_);
  return rep;
}

double GradProjection::bytes() const {
  double n = double(acc_.span() + work_.span());
  for (const auto& t : task_) n += double(t.span());
  return n * sizeof(float);
}

}  // namespace exa::train
