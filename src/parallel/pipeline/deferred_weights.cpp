#include "parallel/pipeline/deferred_weights.hpp"

#include <initializer_list>
#include <vector>

#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/convert.hpp"
#include "kernels/matmul_precision.hpp"

namespace exa::parallel::pipeline {

void WeightGradQueue::open(int micro) {
  EXA_REQUIRE(!deferring_, "WeightGradQueue: micro-batch {}'s backward opened inside another", micro);
  batches_.push_back(Batch{micro, {}, {}});
  deferring_ = true;
}

WeightGradQueue::Copy WeightGradQueue::copy_of(const Act& v, bool half, const char* label) {
  Copy c;
  c.is_half = half;
  if (half) {
    c.half = decltype(c.half)(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), v.extent(0),
                              v.extent(1));
    kernels::fp32_to_bf16(v, c.half);
  } else {
    c.f32 = Act(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), v.extent(0), v.extent(1));
    Kokkos::deep_copy(c.f32, v);
  }
  return c;
}

WeightGradQueue::Act WeightGradQueue::widened(const Copy& c, Kokkos::View<float*, Layout, Device>& buf) {
  if (!c.is_half) return c.f32;
  const std::size_t n = c.half.span();
  if (buf.extent(0) < n) buf = Kokkos::View<float*, Layout, Device>(
                             Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::pipeline::deferred_widened"), n);
  const Act out(buf.data(), c.half.extent(0), c.half.extent(1));
  kernels::bf16_to_fp32(c.half, out);
  return out;
}

void WeightGradQueue::push(const void* seam, const L& inner, const Act& x, const Act& dy, const Wt& dw,
                           bool accumulate, const L::Adapter& ad) {
  auto& b = batches_.back();
  // The product rounds x and dy to bf16 itself; LoRA's dropout scales the
  // adapter's input first, so its operands stay fp32.
  const bool half = kernels::matmul_precision() == kernels::MatmulPrecision::bf16 && !(ad && ad.drops());
  // Only the previous entry's copy can be shared, and only through the same
  // seam: between two products a buffer may be written again (selective
  // recomputation's norm output is the shared input of both sub-blocks of
  // every layer: the next layer's wv and this layer's router read it with
  // other values), so an older copy of the same address can hold other
  // values; and another seam may want its operand in another form.
  Copy xc;
  bool shared = false;
  if (!b.entries.empty() && b.last_seam == seam && b.last == x.data() && b.last_rows == x.extent(0) &&
      b.last_cols == x.extent(1) && b.entries.back().x.is_half == half) {
    xc = b.entries.back().x;
    shared = true;
  }
  // The operands in the form the product needs no collective on (gathered
  // over the Tp group under sequence parallelism), taken now, while every
  // TP rank runs the same B; a shared copy is gathered already (only its
  // shape matters here: weight_operands returns an x of the gathered shape
  // as it is). The same decisions on every rank, so the same collectives.
  const Act xs = !shared        ? x
                 : !xc.is_half ? xc.f32
                               : Act(static_cast<float*>(nullptr), xc.half.extent(0), xc.half.extent(1));
  const auto [wx, wdy] = inner.weight_operands(xs, dy);
  if (!shared) {
    xc = copy_of(wx, half, "exa::pipeline::deferred_x");
    b.inputs.push_back(xc);
  }
  b.last = x.data();
  b.last_seam = seam;
  b.last_rows = x.extent(0);
  b.last_cols = x.extent(1);
  Entry e{&inner, xc, copy_of(wdy, half, "exa::pipeline::deferred_dy"), dw, accumulate, ad, {}, {}, {}};
  if (home_ != nullptr) {
    e.dw_at = home_->locate(dw.data());
    if (ad) {
      e.da_at = home_->locate(ad.da.data());
      e.db_at = home_->locate(ad.db.data());
      // The adapter's factors are small next to the operands.
      auto keep = [](const Wt& v) {
        Act c(Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::pipeline::deferred_adapter"), v.extent(0),
              v.extent(1));
        Kokkos::deep_copy(c, v);
        return c;
      };
      e.kept = {keep(ad.a), keep(ad.b)};
      e.ad.a = e.kept[0];
      e.ad.b = e.kept[1];
    }
  }
  b.entries.push_back(std::move(e));
}

void WeightGradQueue::set_home(GradientHome* home) {
  EXA_REQUIRE(batches_.empty() && !deferring_, "WeightGradQueue: the gradient home changed with W outstanding");
  home_ = home;
}

void WeightGradQueue::run(const Batch& b) {
  // The home's buffers open while consecutive products write a unit and are
  // handed back for reduction as soon as a product writes elsewhere (a
  // unit's products are consecutive: the backward goes unit by unit).
  struct Open {
    GradientHome::Place at;
    float* base;
  };
  std::vector<Open> open;
  auto same = [](const GradientHome::Place& a, const GradientHome::Place& b) {
    return a.owner == b.owner && a.unit == b.unit;
  };
  auto close_except = [&](std::initializer_list<GradientHome::Place> keep) {
    for (std::size_t i = open.size(); i-- > 0;) {
      bool kept = false;
      for (const auto& k : keep) kept = kept || (k && same(k, open[i].at));
      if (kept) continue;
      home_->close_deferred(open[i].at.owner, open[i].at.unit);
      open.erase(open.begin() + std::ptrdiff_t(i));
    }
  };
  auto target = [&](const Wt& recorded, const GradientHome::Place& at) -> Wt {
    if (!at) return recorded;
    for (const auto& o : open)
      if (same(o.at, at)) return Wt(o.base + at.offset, recorded.extent(0), recorded.extent(1));
    open.push_back({at, home_->open_deferred(at.owner, at.unit)});
    return Wt(open.back().base + at.offset, recorded.extent(0), recorded.extent(1));
  };
  // bf16 copies are widened for the product (which rounds them back,
  // exactly); a shared input once for its products.
  const void* widened_x = nullptr;
  Act x;
  for (const auto& e : b.entries) {
    if (e.x.data() != widened_x) {
      x = widened(e.x, x_buf_);
      widened_x = e.x.data();
    }
    const Act dy = widened(e.dy, dy_buf_);
    if (home_ == nullptr) {
      e.inner->backward_weight(x, dy, e.dw, e.accumulate, e.ad);
      continue;
    }
    close_except({e.dw_at, e.da_at, e.db_at});
    L::Adapter ad = e.ad;
    if (ad) {
      ad.da = target(ad.da, e.da_at);
      ad.db = target(ad.db, e.db_at);
    }
    e.inner->backward_weight(x, dy, target(e.dw, e.dw_at), e.accumulate, ad);
  }
  if (home_ != nullptr) close_except({});
}

void WeightGradQueue::run_oldest() {
  if (batches_.empty()) return;
  ScopedRegion region("compute/backward_weight");
  run(batches_.front());
  batches_.pop_front();
}

void WeightGradQueue::run_all() {
  while (!batches_.empty()) run_oldest();
}

std::size_t WeightGradQueue::bytes() const {
  std::size_t n = (x_buf_.span() + dy_buf_.span()) * sizeof(float);
  for (const auto& b : batches_) {
    for (const auto& e : b.entries) {
      n += e.dy.bytes();
      for (const auto& k : e.kept) n += k.span() * sizeof(float);
    }
    for (const auto& in : b.inputs) n += in.bytes();
  }
  return n;
}

void use_deferred_weights(model::Seams<float>& seams, const std::shared_ptr<WeightGradQueue>& queue) {
  if (!queue) return;
  for (auto* l : {&seams.column, &seams.row, &seams.replicated})
    *l = std::make_shared<const DeferredLinear>(*l, queue);
}

}  // namespace exa::parallel::pipeline
