#include "parallel/tensor/replicated_grads.hpp"

#include <cstdlib>
#include <string>

#include "core/error.hpp"
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

std::int64_t total(const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  std::int64_t t = 0;
  for (const auto& r : ranges) t += r.second;
  return t;
}

double sq_norm(const View1<float>& g, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  double s = 0;
  for (const auto& [off, n] : ranges) {
    const auto v = range(g, off, n);
    double part = 0;
    Kokkos::parallel_reduce(
        "exa::tp::replicated_sq_norm", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i, double& acc) { acc += double(v(i)) * double(v(i)); }, part);
    s += part;
  }
  return s;
}

// The ranges of g packed into `pack`, summed over `c`, and back.
void reduce_packed(const View1<float>& g, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
                   const View1<float>& pack, comm::Communicator& c) {
  if (pack.extent(0) == 0) return;
  std::int64_t at = 0;
  for (const auto& [off, n] : ranges) {
    Kokkos::deep_copy(range(pack, at, n), range(g, off, n));
    at += n;
  }
  c.allreduce(pack);
  at = 0;
  for (const auto& [off, n] : ranges) {
    Kokkos::deep_copy(range(g, off, n), range(pack, at, n));
    at += n;
  }
}

}  // namespace

ReplicatedGradients::ReplicatedGradients(std::shared_ptr<comm::Communicator> tp,
                                         std::shared_ptr<comm::Communicator> etp, const model::ParameterStore& store,
                                         const model::StagePlan& plan)
    : tp_(std::move(tp)), etp_(std::move(etp)) {
  const char* skip = std::getenv("EXAMOE_DEBUG_TP_SKIP_NORM_REDUCTION");
  skip_norms_ = skip != nullptr && std::string(skip) == "1";
  if (skip_norms_)
    log::warn("EXAMOE_DEBUG_TP_SKIP_NORM_REDUCTION=1: the norms' gradients are NOT reduced over tensor "
              "parallelism; the losses will drift from the single-rank run (a debug switch for the tests)");
  // Whole routed experts (etp = 1): every TP rank runs them on the same
  // tokens, so their adapters' whole factors (tp_dim < 0) are whole sums
  // already, like the experts' own gradients. Under 1 < etp < tp each
  // block runs them on the same tokens: those factors are sums over the
  // block's parts.
  const bool experts_whole = plan.etp == 1, in_blocks = plan.etp > 1 && plan.etp < plan.tp;
  EXA_REQUIRE(!in_blocks || etp_ != nullptr, "ReplicatedGradients: etp = {} < tp = {} needs the experts' block",
              plan.etp, plan.tp);
  repeats_ = in_blocks ? 1.0 - double(plan.etp) / double(plan.tp) : 0.0;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& s = store.spec(i);
    const std::int64_t n = store.shard(i).count;
    if (n == 0 || !s.trainable) continue;  // a frozen tensor's gradient is never reduced
    const bool expert = s.reduce == model::ReduceGroup::ExpertData;
    const auto d = std::size_t(s.tp_dim);
    const bool whole = s.tp_dim < 0 || model::local_box(s, plan).extent[d] == s.shape[d];
    const std::pair<std::int64_t, std::int64_t> r{store.local_offset(i), n};
    if (whole) (expert ? expert_whole_ : data_whole_).push_back(r);
    else if (expert && in_blocks) expert_split_.push_back(r);
    if (s.tp_dim >= 0) continue;
    if (expert && experts_whole) continue;
    if (skip_norms_ && ends_with(s.name, "norm.weight")) continue;
    (expert && in_blocks ? block_ranges_ : ranges_).push_back(r);
  }
  pack_ = View1<float>("exa::tp::replicated_grads", std::size_t(total(ranges_)));
  block_pack_ = View1<float>("exa::tp::expert_block_grads", std::size_t(total(block_ranges_)));
}

void ReplicatedGradients::reduce(const model::ParameterStore& store) {
  if (pack_.extent(0) == 0 && block_pack_.extent(0) == 0) return;
  ScopedRegion region("comm/tp_grads");
  reduce_packed(store.grads(), ranges_, pack_, *tp_);
  if (etp_) reduce_packed(store.grads(), block_ranges_, block_pack_, *etp_);
}

ReplicatedGradients::Norms ReplicatedGradients::sq_norms(const model::ParameterStore& store) const {
  const auto& g = store.grads();
  Norms n;
  n.data_whole = sq_norm(g, data_whole_);
  n.expert_whole = sq_norm(g, expert_whole_);
  if (repeats_ > 0) n.expert_repeats = repeats_ * sq_norm(g, expert_split_);
  return n;
}

}  // namespace exa::parallel::tensor
