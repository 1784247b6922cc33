// The expert-parallel all-to-all dispatcher against the single-rank one:
// every rank routes its own tokens; the EP result (outputs, input and gate
// gradients) must equal what one rank holding every expert computes for
// those tokens, and each rank's expert weight gradients must equal the sum
// over all ranks of the single-rank gradients of its experts. Cases:
// balanced routing, every token of every rank routed to one rank's experts
// (zero-row messages and experts, the skew that hangs naive dispatchers),
// and a capacity that drops. Each runs in a context that first carried a
// skewed micro-batch (its buffers and maps keep that size), with the
// exchange in one piece and cut into parts (moe.a2a_chunks: 3, and 64,
// more parts than rows between two ranks, so most parts carry nothing);
// and the parts under bf16 compression against the compressed whole.
// Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "kernels/wire_codec.hpp"
#include "model/activation_context.hpp"
#include "model/seams/local_token_dispatcher.hpp"
#include "parallel/expert/all_to_all_dispatcher.hpp"

namespace {

using exa::index_t;
using V2 = Kokkos::View<float**, exa::Layout, exa::Device>;
using V3 = Kokkos::View<float***, exa::Layout, exa::Device>;
using I2 = Kokkos::View<int**, exa::Layout, exa::Device>;
using Context = exa::model::LayerContext<float>;
using Weights = exa::model::LayerWeights<float>;

constexpr index_t kN = 24, kK = 2, kD = 8, kF = 6;

// A value in [-0.5, 0.5) per (seed, element) (splitmix64).
float noise(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) / float(1ull << 24) - 0.5f;
}

template <class V>
V random_view(const char* name, std::vector<std::size_t> ext, std::uint64_t seed) {
  V v;
  if constexpr (V::rank == 2) v = V(std::string(name), ext[0], ext[1]);
  if constexpr (V::rank == 3) v = V(std::string(name), ext[0], ext[1], ext[2]);
  auto h = Kokkos::create_mirror_view(v);
  float* p = h.data();
  for (std::size_t i = 0; i < h.span(); ++i) p[i] = noise(seed, i);
  Kokkos::deep_copy(v, h);
  return v;
}

std::vector<float> host(const V2& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.span());
}

std::vector<float> host3(const V3& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.span());
}

enum class Routing { Balanced, AllToRankZero, Capacity };

// This rank's routing: distinct experts per token.
Context make_context(int E, Routing routing, int rank) {
  Context c;
  c.topk = I2("topk", kN, kK);
  c.gates = random_view<V2>("gates", {std::size_t(kN), std::size_t(kK)}, 77 + rank);
  auto t = Kokkos::create_mirror_view(c.topk);
  for (index_t n = 0; n < kN; ++n) {
    int a = 0, b = 1;  // AllToRankZero: experts 0 and 1, both on EP rank 0 (E/ep >= 2)
    if (routing != Routing::AllToRankZero) {
      const auto u = std::uint64_t((noise(1234 + 31 * rank, std::uint64_t(n)) + 0.5f) * float(1 << 20));
      a = int(u % std::uint64_t(E));
      b = (a + 1 + int((u / 7) % std::uint64_t(E - 1))) % E;
    }
    t(n, 0) = a;
    t(n, 1) = b;
  }
  Kokkos::deep_copy(c.topk, t);
  c.xp = V2("xp", kN * kK, kD);
  c.ea = V2("ea", kN * kK, kF);
  c.eb = V2("eb", kN * kK, kF);
  c.eh = V2("eh", kN * kK, kF);
  c.yp = V2("yp", kN * kK, kD);
  return c;
}

Weights slice(const Weights& all, index_t begin, index_t end) {
  Weights w;
  const auto r = Kokkos::make_pair(begin, end);
  w.w1 = Kokkos::subview(all.w1, r, Kokkos::ALL, Kokkos::ALL);
  w.w3 = Kokkos::subview(all.w3, r, Kokkos::ALL, Kokkos::ALL);
  w.w2 = Kokkos::subview(all.w2, r, Kokkos::ALL, Kokkos::ALL);
  return w;
}

// E experts, the same on every rank, and this rank's tokens and output
// gradients (LayerWeights views are unmanaged: the managed ones live here).
struct Experts {
  V3 w1, w3, w2;
  Weights all;
  V2 xn, dy;
  Experts(int E, int rank)
      : w1(random_view<V3>("w1", {std::size_t(E), std::size_t(kF), std::size_t(kD)}, 1)),
        w3(random_view<V3>("w3", {std::size_t(E), std::size_t(kF), std::size_t(kD)}, 2)),
        w2(random_view<V3>("w2", {std::size_t(E), std::size_t(kD), std::size_t(kF)}, 3)),
        xn(random_view<V2>("xn", {std::size_t(kN), std::size_t(kD)}, 100 + std::uint64_t(rank))),
        dy(random_view<V2>("dy", {std::size_t(kN), std::size_t(kD)}, 200 + std::uint64_t(rank))) {
    all.w1 = w1;
    all.w3 = w3;
    all.w2 = w2;
  }
};

// Zeroed gradients and the managed views behind them.
struct Grads {
  V3 w1, w3, w2;
  Weights bound;
  explicit Grads(int E) : w1("g1", E, kF, kD), w3("g3", E, kF, kD), w2("g2", E, kD, kF) {
    bound.w1 = w1;
    bound.w3 = w3;
    bound.w2 = w2;
  }
};

struct Result {
  std::vector<float> y, dxn, dgates, g1, g3, g2;
};

template <class Dispatcher>
Result run(Dispatcher& disp, Context& c, const Weights& w, int E_local, index_t capacity, const V2& xn,
           const V2& dy) {
  V2 y("y", kN, kD), dxn("dxn", kN, kD), dgates("dgates", kN, kK);
  const Grads g(E_local);
  disp.forward(c, w, capacity, xn, y);
  disp.backward(c, w, g.bound, dy, dxn, dgates);
  return {host(y), host(dxn), host(dgates), host3(g.w1), host3(g.w3), host3(g.w2)};
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::fabs(b[i])) << what << " element " << i;
}

// Every rank of the world in one EP group.
exa::comm::ProcessGrid ep_grid() {
  exa::comm::GridSizes sizes;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  sizes.ep = world;
  return exa::comm::ProcessGrid(sizes);
}

class AllToAllDispatcher : public ::testing::TestWithParam<std::tuple<Routing, int>> {};

TEST_P(AllToAllDispatcher, MatchesOneRankHoldingEveryExpert) {
  const exa::comm::ProcessGrid grid = ep_grid();
  const int P = grid.size(exa::comm::Group::Ep), rank = grid.rank(exa::comm::Group::Ep);
  const int El = 2, E = El * P;
  const auto [routing, chunks] = GetParam();
  const index_t capacity = routing == Routing::Capacity ? 3 : 0;

  // The same experts everywhere; different tokens on every rank.
  const Experts x(E, rank);
  const Weights& all = x.all;
  const V2 &xn = x.xn, &dy = x.dy;

  exa::model::LocalTokenDispatcher<float> local(E);
  Context one = make_context(E, routing, rank);
  const Result ref = run(local, one, all, E, capacity, xn, dy);

  std::shared_ptr<exa::comm::Communicator> ep = exa::comm::make_mpi_communicator(grid.comm(exa::comm::Group::Ep));
  exa::parallel::expert::AllToAllDispatcher<float> a2a(ep, ep, E);
  a2a.set_chunks(chunks);
  ASSERT_EQ(a2a.local_experts(), El);
  // The context first carries a micro-batch whose routing sends every row
  // to rank 0's experts, as a training run's pooled context does: its
  // buffers and row maps keep that size for the next micro-batch.
  const Weights mine = slice(all, rank * El, (rank + 1) * El);
  Context c = make_context(E, Routing::AllToRankZero, rank);
  run(a2a, c, mine, El, 0, xn, dy);
  const Context next = make_context(E, routing, rank);
  c.topk = next.topk;
  c.gates = next.gates;
  const Result got = run(a2a, c, mine, El, capacity, xn, dy);

  expect_near(got.y, ref.y, "y");
  expect_near(got.dxn, ref.dxn, "dxn");
  expect_near(got.dgates, ref.dgates, "dgates");
  // Expert gradients: this rank's experts, summed over every rank's tokens.
  for (auto [mine, theirs, name] : {std::tuple{&got.g1, &ref.g1, "dw1"}, std::tuple{&got.g3, &ref.g3, "dw3"},
                                    std::tuple{&got.g2, &ref.g2, "dw2"}}) {
    std::vector<float> sum(theirs->size());
    ep->allreduce(theirs->data(), sum.data(), sum.size());
    const std::size_t per = sum.size() / std::size_t(E);
    const std::vector<float> want(sum.begin() + std::ptrdiff_t(per * std::size_t(rank * El)),
                                  sum.begin() + std::ptrdiff_t(per * std::size_t((rank + 1) * El)));
    expect_near(*mine, want, name);
  }
}

// comm.a2a_compression with the exchange in parts: each part's rows travel
// encoded in buffers of their own. bf16 rounds each value alone, so the
// parts give what the whole exchange gives (the same rounding of the same
// rows), and that differs from the uncompressed exchange (the rows did go
// through bf16).
TEST(AllToAllDispatcherParts, CompressedPartsEqualTheCompressedWhole) {
  const exa::comm::ProcessGrid grid = ep_grid();
  const int P = grid.size(exa::comm::Group::Ep), rank = grid.rank(exa::comm::Group::Ep);
  const int El = 2, E = El * P;
  const Experts x(E, rank);
  const Weights mine = slice(x.all, rank * El, (rank + 1) * El);
  const V2 &xn = x.xn, &dy = x.dy;
  std::shared_ptr<exa::comm::Communicator> ep = exa::comm::make_mpi_communicator(grid.comm(exa::comm::Group::Ep));
  auto result = [&](int chunks, exa::kernels::WireFormat format) {
    exa::parallel::expert::AllToAllDispatcher<float> a2a(ep, ep, E);
    a2a.set_wire_codec(exa::kernels::WireCodec(format));
    a2a.set_chunks(chunks);
    Context c = make_context(E, Routing::Balanced, rank);
    return run(a2a, c, mine, El, 0, xn, dy);
  };
  const Result whole = result(1, exa::kernels::WireFormat::BF16);
  for (int chunks : {3, 64}) {
    const Result parts = result(chunks, exa::kernels::WireFormat::BF16);
    expect_near(parts.y, whole.y, "y");
    expect_near(parts.dxn, whole.dxn, "dxn");
    expect_near(parts.dgates, whole.dgates, "dgates");
    expect_near(parts.g1, whole.g1, "dw1");
    expect_near(parts.g2, whole.g2, "dw2");
  }
  const Result exact = result(3, exa::kernels::WireFormat::F32);
  double diff = 0;
  for (std::size_t i = 0; i < exact.y.size(); ++i) diff = std::max(diff, double(std::fabs(exact.y[i] - whole.y[i])));
  EXPECT_GT(diff, 1e-6) << "the compressed exchange moved the rows exactly";
}

INSTANTIATE_TEST_SUITE_P(Routings, AllToAllDispatcher,
                         ::testing::Combine(::testing::Values(Routing::Balanced, Routing::AllToRankZero,
                                                              Routing::Capacity),
                                            ::testing::Values(1, 3, 64)),
                         [](const auto& info) {
                           const Routing r = std::get<0>(info.param);
                           const std::string name = r == Routing::Balanced        ? "Balanced"
                                                    : r == Routing::AllToRankZero ? "AllToRankZero"
                                                                                  : "Capacity";
                           return name + "_chunks" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
