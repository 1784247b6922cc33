#include "parallel/pipeline/deferred_weights.hpp"

#include "core/error.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::pipeline {

void WeightGradQueue::open(int micro) {
  EXA_REQUIRE(!deferring_, "WeightGradQueue: micro-batch {}'s backward opened inside another", micro);
  batches_.push_back(Batch{micro, {}, {}});
  deferring_ = true;
}

void WeightGradQueue::push(const L& inner, const Act& x, const Act& dy, const Wt& dw, bool accumulate,
                           const L::Adapter& ad) {
  auto& b = batches_.back();
  // Only the previous entry's copy can be shared: between two products a
  // buffer may be written again (selective recomputation's norm output is
  // the shared input of both sub-blocks of every layer), so an older copy
  // of the same address can hold other values.
  Act xc;
  if (!b.entries.empty() && b.last == x.data()) {
    const Act& prev = b.entries.back().x;
    if (prev.extent(0) == x.extent(0) && prev.extent(1) == x.extent(1)) xc = prev;
  }
  if (xc.data() == nullptr) {
    xc = Act("exa::pipeline::deferred_x", x.extent(0), x.extent(1));
    Kokkos::deep_copy(xc, x);
    b.inputs.push_back(xc);
  }
  b.last = x.data();
  Act dyc("exa::pipeline::deferred_dy", dy.extent(0), dy.extent(1));
  Kokkos::deep_copy(dyc, dy);
  b.entries.push_back(Entry{&inner, xc, dyc, dw, accumulate, ad});
}

void WeightGradQueue::run_oldest() {
  if (batches_.empty()) return;
  ScopedRegion region("compute/backward_weight");
  for (const auto& e : batches_.front().entries) e.inner->backward_weight(e.x, e.dy, e.dw, e.accumulate, e.ad);
  batches_.pop_front();
}

void WeightGradQueue::run_all() {
  while (!batches_.empty()) run_oldest();
}

std::size_t WeightGradQueue::bytes() const {
  std::size_t n = 0;
  for (const auto& b : batches_) {
    for (const auto& e : b.entries) n += e.dy.span() * sizeof(float);
    for (const auto& in : b.inputs) n += in.span() * sizeof(float);
  }
  return n;
}

void use_deferred_weights(model::Seams<float>& seams, const std::shared_ptr<WeightGradQueue>& queue) {
  if (!queue) return;
  for (auto* l : {&seams.column, &seams.row, &seams.replicated})
    *l = std::make_shared<const DeferredLinear>(*l, queue);
}

}  // namespace exa::parallel::pipeline
