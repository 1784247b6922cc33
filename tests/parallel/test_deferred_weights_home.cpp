// zb's deferred weight gradients under ZeRO 2/3: the buffer a product was
// recorded against is reused by another unit before W runs, so the queue
// asks its GradientHome where the gradient lives while recording, and W
// writes into buffers the home opens per unit and closes (for reduction)
// as soon as the products move on to another unit. Here the home is a
// stand-in for the ZeRO engine: one shared slot, reused between units.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/noise_matrix.hpp"
#include "kernels/gemm.hpp"
#include "model/seams/local_linear.hpp"
#include "parallel/pipeline/deferred_weights.hpp"

namespace {

using exa::parallel::pipeline::DeferredLinear;
using exa::parallel::pipeline::GradientHome;
using exa::parallel::pipeline::WeightGradQueue;
using Act = WeightGradQueue::Act;
using Wt = WeightGradQueue::Wt;
using Own = Kokkos::View<float**, exa::Layout, exa::Device>;
using Flat = Kokkos::View<float*, exa::Layout, exa::Device>;

Own random(const char* name, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  return exa::test::noise_matrix<float>(name, rows, cols, seed);
}

// One unit-sized slot that every unit's backward writes (as ZeRO 2's two
// alternate), and W's buffers, each copied out when closed.
class SlotHome final : public GradientHome {
 public:
  explicit SlotHome(std::size_t n) : slot_("slot", n), w_("w", n) {}
  float* slot() const { return slot_.data(); }
  int unit_in_slot = -1;

  Place locate(const float* grad) const override {
    if (grad < slot_.data() || grad >= slot_.data() + slot_.extent(0)) return {};
    return Place{0, unit_in_slot, grad - slot_.data()};
  }
  float* open_deferred(int owner, int unit) override {
    EXPECT_EQ(owner, 0);
    EXPECT_EQ(open_unit_, -1) << "one unit open at a time";
    open_unit_ = unit;
    Kokkos::deep_copy(w_, 0.0f);
    return w_.data();
  }
  void close_deferred(int owner, int unit) override {
    EXPECT_EQ(owner, 0);
    EXPECT_EQ(open_unit_, unit);
    open_unit_ = -1;
    closed.push_back(unit);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w_);
    auto& sum = reduced[unit];
    sum.resize(h.extent(0), 0.0f);
    for (std::size_t i = 0; i < h.extent(0); ++i) sum[i] += h(i);
  }
  std::vector<int> closed;
  std::map<int, std::vector<float>> reduced;  // what each unit's closes summed

 private:
  Flat slot_, w_;
  int open_unit_ = -1;
};

void expect_product_at(const std::vector<float>& got, std::size_t at, const Own& dy, const Own& x, float times,
                       const char* what) {
  const Own want("want", dy.extent(1), x.extent(1));
  exa::kernels::gemm('T', 'N', times, dy, x, 0.0f, want);
  auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), want);
  for (std::size_t i = 0; i < w.extent(0); ++i)
    for (std::size_t j = 0; j < w.extent(1); ++j)
      ASSERT_NEAR(got[at + i * w.extent(1) + j], w(i, j), 1e-5f * (1 + std::abs(w(i, j)))) << what;
}

TEST(DeferredWeightsHome, ProductsLandInTheirUnitsBuffersNotTheReusedSlot) {
  const std::size_t n = 6, d = 4, f = 3, unit = 2 * f * d;
  auto queue = std::make_shared<WeightGradQueue>();
  SlotHome home(unit);
  queue->set_home(&home);
  EXPECT_TRUE(queue->fixed_order());
  const DeferredLinear lin(std::make_shared<const exa::model::LocalLinear<float>>(), queue);
  const Own x1 = random("x1", n, d, 1), dy1a = random("dy1a", n, f, 2), dy1b = random("dy1b", n, f, 3);
  const Own x0 = random("x0", n, d, 4), dy0 = random("dy0", n, f, 5);
  const Wt first(home.slot(), f, d), second(home.slot() + f * d, f, d);

  // Micro-batch 0's backward: unit 1 writes both halves of the slot, then
  // unit 0 reuses the slot and writes its second half.
  queue->open(0);
  home.unit_in_slot = 1;
  lin.backward_weight(x1, dy1a, first, true);
  lin.backward_weight(x1, dy1b, second, true);
  home.unit_in_slot = 0;
  lin.backward_weight(x0, dy0, second, true);
  queue->close();
  // Micro-batch 1's: unit 0 again, the same product.
  queue->open(1);
  lin.backward_weight(x0, dy0, second, true);
  queue->close();
  EXPECT_EQ(queue->pending(), 2u);
  Kokkos::deep_copy(Flat(home.slot(), unit), 5.0f);  // the slot holds another unit by now

  queue->run_all();
  EXPECT_TRUE(queue->empty());
  EXPECT_EQ(home.closed, (std::vector<int>{1, 0, 0})) << "a unit's buffer closes when the products move on";
  auto slot = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Flat(home.slot(), unit));
  for (std::size_t i = 0; i < unit; ++i) ASSERT_EQ(slot(i), 5.0f) << "W wrote into the reused slot";
  expect_product_at(home.reduced[1], 0, dy1a, x1, 1.0f, "unit 1, first");
  expect_product_at(home.reduced[1], f * d, dy1b, x1, 1.0f, "unit 1, second");
  expect_product_at(home.reduced[0], f * d, dy0, x0, 2.0f, "unit 0, both micro-batches");
  for (std::size_t i = 0; i < f * d; ++i) ASSERT_EQ(home.reduced[0][i], 0.0f) << "unit 0 wrote its first half";

  queue->set_home(nullptr);
  EXPECT_FALSE(queue->fixed_order());
}

TEST(DeferredWeightsHome, WithoutAHomeTheRecordedBufferIsWritten) {
  const std::size_t n = 5, d = 3, f = 2;
  auto queue = std::make_shared<WeightGradQueue>();
  const DeferredLinear lin(std::make_shared<const exa::model::LocalLinear<float>>(), queue);
  const Own x = random("x", n, d, 7), dy = random("dy", n, f, 8), dw("dw", f, d);
  queue->open(0);
  lin.backward_weight(x, dy, Wt(dw.data(), f, d), true);
  queue->close();
  queue->run_all();
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw);
  std::vector<float> got(h.data(), h.data() + h.size());
  expect_product_at(got, 0, dy, x, 1.0f, "no home");
}

}  // namespace
