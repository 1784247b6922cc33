// zb's deferred weight gradients under bf16 products: the queue keeps its
// operand copies in bf16, since every product rounds its inputs to bf16
// anyway, so W writes bit for bit what an undeferred backward writes, from
// half the bytes; an adapter with LoRA dropout (its input is scaled before
// it is rounded) and fp32 products keep fp32 copies.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "harness/noise_matrix.hpp"
#include "kernels/matmul_precision.hpp"
#include "kernels/onednn_matmul.hpp"
#include "model/seams/local_linear.hpp"
#include "parallel/pipeline/deferred_weights.hpp"

namespace {

using exa::kernels::MatmulPrecision;
using exa::kernels::ScopedMatmulPrecision;
using exa::parallel::pipeline::DeferredLinear;
using exa::parallel::pipeline::WeightGradQueue;
using Act = WeightGradQueue::Act;
using Wt = WeightGradQueue::Wt;
using Own = Kokkos::View<float**, exa::Layout, exa::Device>;

constexpr std::size_t n = 6, d = 5, f = 4, g = 3, r = 2;

Own random(const char* name, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  return exa::test::noise_matrix<float>(name, rows, cols, seed);
}

std::vector<float> host(const Own& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return {h.data(), h.data() + h.size()};
}

void expect_bitwise(const Own& got, const Own& want, const char* what) {
  const auto a = host(got), b = host(want);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

struct Run {
  Own dw1, dw2, dw3, da, db;
  std::size_t bytes = 0;  // the queue's copies before W ran
};

// Three products: two through one seam from one input x (they share its
// copy, as wq and wk do), one through another seam from x2; the first
// with an adapter when `adapter` (dropout `dropout`).
Run run(bool deferred, bool adapter, float dropout) {
  const Own x = random("x", n, d, 1), x2 = random("x2", n, f, 2);
  const Own dy1 = random("dy1", n, f, 3), dy2 = random("dy2", n, g, 4), dy3 = random("dy3", n, d, 5);
  const Own a = random("a", r, d, 6), b = random("b", f, r, 7);
  Run out{Own("dw1", f, d), Own("dw2", g, d), Own("dw3", d, f), Own("da", r, d), Own("db", f, r), 0};
  exa::model::LoraAdapter<float> ad;
  if (adapter) {
    ad.a = Wt(a.data(), r, d);
    ad.b = Wt(b.data(), f, r);
    ad.da = Wt(out.da.data(), r, d);
    ad.db = Wt(out.db.data(), f, r);
    ad.scale = 0.5f;
    ad.dropout = dropout;
    ad.key = dropout > 0 ? 11 : 0;
  }
  auto queue = std::make_shared<WeightGradQueue>();
  auto local = std::make_shared<const exa::model::LocalLinear<float>>();
  const DeferredLinear first(local, queue), second(local, queue);
  if (deferred) queue->open(0);
  first.backward_weight(x, dy1, Wt(out.dw1.data(), f, d), true, ad);
  first.backward_weight(x, dy2, Wt(out.dw2.data(), g, d), true);
  second.backward_weight(x2, dy3, Wt(out.dw3.data(), d, f), true);
  if (deferred) {
    queue->close();
    out.bytes = queue->bytes();
    queue->run_all();
  }
  return out;
}

TEST(DeferredWeightsBf16, CopiesAreBf16AndWIsExact) {
  if (!exa::kernels::onednn_available()) GTEST_SKIP() << "bf16 products need oneDNN (EXAMOE_ENABLE_ONEDNN)";
  const ScopedMatmulPrecision bf16(MatmulPrecision::bf16);
  const auto want = run(false, true, 0.0f), got = run(true, true, 0.0f);
  // x once (shared by the first two), x2, and the three output gradients.
  EXPECT_EQ(got.bytes, 2 * (n * d + n * f + n * f + n * g + n * d));
  expect_bitwise(got.dw1, want.dw1, "dw1");
  expect_bitwise(got.dw2, want.dw2, "dw2");
  expect_bitwise(got.dw3, want.dw3, "dw3");
  expect_bitwise(got.da, want.da, "the adapter's dA");
  expect_bitwise(got.db, want.db, "the adapter's dB");
}

TEST(DeferredWeightsBf16, DropoutAndFp32KeepFp32Copies) {
  const std::size_t fp32_bytes = 4 * (n * d + n * f + n * f + n * g + n * d);
  EXPECT_EQ(run(true, true, 0.0f).bytes, fp32_bytes) << "fp32 products";
  if (!exa::kernels::onednn_available()) GTEST_SKIP() << "bf16 products need oneDNN (EXAMOE_ENABLE_ONEDNN)";
  const ScopedMatmulPrecision bf16(MatmulPrecision::bf16);
  const auto want = run(false, true, 0.25f), got = run(true, true, 0.25f);
  // The adapted product's x and dy in fp32: the second product cannot
  // share the fp32 copy of x, so it keeps a bf16 one of its own.
  EXPECT_EQ(got.bytes, 4 * (n * d + n * f) + 2 * (n * d + n * g + n * f + n * d));
  expect_bitwise(got.dw1, want.dw1, "dw1");
  expect_bitwise(got.da, want.da, "the adapter's dA");
  expect_bitwise(got.db, want.db, "the adapter's dB");
  expect_bitwise(got.dw2, want.dw2, "dw2");
}

}  // namespace
