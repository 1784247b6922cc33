#include "parallel/tensor/replicated_grads.hpp"

#include <cstdlib>
#include <string>

#include "core/log.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::tensor {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

View1<float> range(const View1<float>& v, std::int64_t lo, std::int64_t n) {
  return Kokkos::subview(v, Kokkos::make_pair(std::size_t(lo), std::size_t(lo + n)));
}

}  // namespace

ReplicatedGradients::ReplicatedGradients(std::shared_ptr<comm::Communicator> tp, const model::ParameterStore& store,
                                         const model::StagePlan& plan)
    : tp_(std::move(tp)) {
  const char* skip = std::getenv("EXAMOE_DEBUG_TP_SKIP_NORM_REDUCTION");
  skip_norms_ = skip != nullptr && std::string(skip) == "1";
  if (skip_norms_)
    log::warn("EXAMOE_DEBUG_TP_SKIP_NORM_REDUCTION=1: the norms' gradients are NOT reduced over tensor "
              "parallelism; the losses will drift from the single-rank run (a debug switch for the tests)");
  // Whole routed experts (etp = 1): every TP rank runs them on the same
  // tokens, so their adapters' whole factors (tp_dim < 0) are whole sums
  // already, like the experts' own gradients.
  bool experts_whole = false;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& s = store.spec(i);
    if (s.reduce == model::ReduceGroup::ExpertData && s.tp_dim >= 0)
      experts_whole = model::local_box(s, plan).extent[std::size_t(s.tp_dim)] == s.shape[std::size_t(s.tp_dim)];
    const std::int64_t n = store.shard(i).count;
    if (n == 0 || !s.trainable) continue;  // a frozen tensor's gradient is never reduced
    const auto d = std::size_t(s.tp_dim);
    const bool whole = s.tp_dim < 0 || model::local_box(s, plan).extent[d] == s.shape[d];
    if (whole) all_.emplace_back(store.local_offset(i), n);
    if (s.tp_dim >= 0) continue;
    if (s.reduce == model::ReduceGroup::ExpertData && experts_whole) continue;
    if (skip_norms_ && ends_with(s.name, "norm.weight")) continue;
    ranges_.emplace_back(store.local_offset(i), n);
    total_ += n;
  }
  pack_ = View1<float>("exa::tp::replicated_grads", std::size_t(total_));
}

void ReplicatedGradients::reduce(const model::ParameterStore& store) {
  if (total_ == 0) return;
  ScopedRegion region("comm/tp_grads");
  const auto& g = store.grads();
  std::int64_t at = 0;
  for (const auto& [off, n] : ranges_) {
    Kokkos::deep_copy(range(pack_, at, n), range(g, off, n));
    at += n;
  }
  tp_->allreduce(pack_);
  at = 0;
  for (const auto& [off, n] : ranges_) {
    Kokkos::deep_copy(range(g, off, n), range(pack_, at, n));
    at += n;
  }
}

double ReplicatedGradients::sq_norm(const model::ParameterStore& store) const {
  const auto& g = store.grads();
  double s = 0;
  for (const auto& [off, n] : all_) {
    const auto v = range(g, off, n);
    double part = 0;
    Kokkos::parallel_reduce(
        "exa::tp::replicated_sq_norm", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i, double& acc) { acc += double(v(i)) * double(v(i)); }, part);
    s += part;
  }
  return s;
}

}  // namespace exa::parallel::tensor
