#include "parallel/pipeline/deferred_weights.hpp"

#include "core/error.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::pipeline {

void WeightGradQueue::open(int micro) {
  EXA_REQUIRE(!deferring_, "WeightGradQueue: micro-batch {}'s backward opened inside another", micro);
  batches_.push_back(Batch{micro, {}, {}});
  deferring_ = true;
}

void WeightGradQueue::push(const void* seam, const L& inner, const Act& x, const Act& dy, const Wt& dw,
                           bool accumulate, const L::Adapter& ad) {
  auto& b = batches_.back();
  // Only the previous entry's copy can be shared, and only through the same
  // seam: between two products a buffer may be written again (selective
  // recomputation's norm output is the shared input of both sub-blocks of
  // every layer: the next layer's wv and this layer's router read it with
  // other values), so an older copy of the same address can hold other
  // values; and another seam may want its operand in another form.
  Act xc;
  if (!b.entries.empty() && b.last_seam == seam && b.last == x.data() && b.last_rows == x.extent(0) &&
      b.last_cols == x.extent(1))
    xc = b.entries.back().x;
  // The operands in the form the product needs no collective on (gathered
  // over the Tp group under sequence parallelism), taken now, while every
  // TP rank runs the same B; a shared copy is gathered already. The same
  // decisions on every rank, so the same collectives.
  const auto [wx, wdy] = inner.weight_operands(xc.data() != nullptr ? xc : x, dy);
  if (xc.data() == nullptr) {
    xc = Act("exa::pipeline::deferred_x", wx.extent(0), wx.extent(1));
    Kokkos::deep_copy(xc, wx);
    b.inputs.push_back(xc);
  }
  b.last = x.data();
  b.last_seam = seam;
  b.last_rows = x.extent(0);
  b.last_cols = x.extent(1);
  Act dyc("exa::pipeline::deferred_dy", wdy.extent(0), wdy.extent(1));
  Kokkos::deep_copy(dyc, wdy);
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
