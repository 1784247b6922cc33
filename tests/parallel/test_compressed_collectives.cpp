// The data-parallel collectives with compression (comm.compression;
// parallel/data/data_group.hpp), at 1, 2 and 4 ranks:
//   - the int8 and bf16 reduce-scatter equals, bitwise, the fp32 sum in rank
//     order of every rank's decoded payload (what each rank sent);
//   - the compressed allreduce leaves the same values on every rank: the
//     decoded encoding of that reduce-scatter's sums;
//   - the bytes ledger counts the cut (wire over logical: 1/2 for bf16,
//     (1 + 4/Q)/4 for int8 in blocks of Q);
//   - the compressed parameter allgather (comm.weight_compression) gives
//     every rank every part decoded, its own too, flat or hierarchical
//     (both stages encoded, or the inter-node one only);
//   - top-k: the sums are every rank's kept values added in rank order
//     (ratio 1: the dense sum itself), the residuals hold the rest, the
//     ledger counts 6 bytes a kept value, and warm-up steps are dense.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "comm/process_grid.hpp"
#include "comm/traffic_ledger.hpp"
#include "harness/host_views.hpp"
#include "kernels/topk_codec.hpp"
#include "kernels/wire_codec.hpp"
#include "parallel/data/data_group.hpp"

using namespace exa;
using kernels::WireCodec;
using kernels::WireFormat;
using test::to_device;
using test::to_host;

namespace {

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Rank r's gradient of n values.
std::vector<float> grads(int r, std::int64_t n) {
  std::vector<float> g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) g[std::size_t(i)] = float(std::sin(0.13 * double(i) + r) * (1 + r) * 1e-2);
  return g;
}

// decode(encode(x)) over the whole of x.
std::vector<float> through(const WireCodec& c, const std::vector<float>& x) {
  const auto n = std::int64_t(x.size());
  View1<std::int32_t> w("w", std::size_t(c.words(n)));
  c.encode(to_device(x), w);
  View1<float> y("y", x.size());
  c.decode(w, n, y);
  return to_host(y);
}

}  // namespace

class Compressed : public ::testing::TestWithParam<WireFormat> {};

TEST_P(Compressed, ReduceScatterSumsTheDecodedPayloadsInRankOrder) {
  const int P = size_of(), me = rank_of();
  const WireCodec codec(GetParam(), 64);
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, codec);
  const std::int64_t B = 150;  // not a multiple of the quantization block
  View1<float> recv("recv", std::size_t(B));
  auto r = g.ireduce_scatter(to_device(grads(me, P * B)), recv, 1);
  parallel::data::DataGroup::wait(r);
  std::vector<float> want(std::size_t(B), 0.0f);
  for (int q = 0; q < P; ++q) {
    const auto all = grads(q, P * B);
    const std::vector<float> mine(all.begin() + me * B, all.begin() + (me + 1) * B);
    const auto d = through(codec, mine);
    for (std::int64_t i = 0; i < B; ++i) want[std::size_t(i)] = q == 0 ? d[std::size_t(i)] : want[std::size_t(i)] + d[std::size_t(i)];
  }
  if (P == 1) want = std::vector<float>(grads(0, B));  // nothing to send: the gradient itself
  const auto got = to_host(recv);
  for (std::int64_t i = 0; i < B; ++i) EXPECT_EQ(got[std::size_t(i)], want[std::size_t(i)]) << "element " << i;
}

TEST_P(Compressed, AllreduceLeavesTheSameValuesEverywhere) {
  const int P = size_of(), me = rank_of();
  const WireCodec codec(GetParam(), 64);
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, codec);
  const std::int64_t n = 1001;  // pads to P blocks
  const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  auto v = to_device(grads(me, n));
  auto r = g.iallreduce(v, 0);
  parallel::data::DataGroup::wait(r);
  const auto got = to_host(v);
  // Close to the exact sum ...
  std::vector<double> exact(std::size_t(n), 0.0);
  for (int q = 0; q < P; ++q) {
    const auto x = grads(q, n);
    for (std::int64_t i = 0; i < n; ++i) exact[std::size_t(i)] += x[std::size_t(i)];
  }
  const double tol = GetParam() == WireFormat::BF16 ? 2e-2 : 4e-2;  // in units of the largest |sum|
  double big = 0;
  for (const double e : exact) big = std::max(big, std::abs(e));
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[std::size_t(i)], exact[std::size_t(i)], tol * big) << i;
  // ... and bitwise the same on every rank.
  std::vector<float> rank0 = got;
  MPI_Bcast(rank0.data(), int(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(got, rank0);
  // The ledger: what this allreduce sent against fp32.
  const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  const double logical = after.logical - before.logical, wire = after.wire - before.wire;
  if (P == 1) {
    EXPECT_EQ(logical, 0.0);
  } else {
    const std::int64_t B = (n + P - 1) / P;
    EXPECT_DOUBLE_EQ(wire, 2.0 * (P - 1) * double(codec.words(B)) * 4);
    EXPECT_LE(wire / logical, GetParam() == WireFormat::BF16 ? 0.51 : 0.27);
  }
}

TEST_P(Compressed, WeightAllgatherDecodesEveryPartAlike) {
  const int P = size_of(), me = rank_of();
  const WireCodec codec(GetParam(), 64);
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, {}, codec);
  const std::int64_t B = 130;
  View1<float> recv("recv", std::size_t(P * B));
  const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::ZeroWeights)];
  auto r = g.iallgather(to_device(grads(me, B)), recv, 1);
  parallel::data::DataGroup::wait(r);
  const auto got = to_host(recv);
  for (int q = 0; q < P; ++q) {
    // One rank alone sends nothing: its part stays exact.
    const auto want = P == 1 ? grads(q, B) : through(codec, grads(q, B));
    for (std::int64_t i = 0; i < B; ++i)
      EXPECT_EQ(got[std::size_t(q * B + i)], want[std::size_t(i)]) << "part " << q << " element " << i;
  }
  const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::ZeroWeights)];
  if (P > 1) EXPECT_DOUBLE_EQ(after.wire - before.wire, double(P - 1) * double(codec.words(B)) * 4);
}

INSTANTIATE_TEST_SUITE_P(Formats, Compressed, ::testing::Values(WireFormat::BF16, WireFormat::Int8),
                         [](const auto& info) { return std::string(kernels::wire_format_name(info.param)); });

// Top-k (comm.compression = "topk"): each rank's payload is the top of its
// gradient plus residual; the sums are those payloads added into zeros in
// rank order, alike on every rank, and the residuals hold the rest.
namespace {

// Rank q's sparsified block (what it sends) and its new residual, from
// gradient g and residual r.
std::pair<std::vector<float>, std::vector<float>> sparsified(const kernels::TopkCodec& c, const std::vector<float>& g,
                                                             const std::vector<float>& r) {
  const auto n = std::int64_t(g.size());
  View1<std::int32_t> w("w", std::size_t(c.words(n)));
  View1<float> res = to_device(r);
  c.encode(to_device(g), res, w);
  View1<float> y("y", g.size());
  c.decode_add(w, n, y);
  return {to_host(y), to_host(res)};
}

std::vector<float> residual0(int q, std::int64_t n) {
  std::vector<float> r(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) r[std::size_t(i)] = float(std::cos(0.29 * double(i) + 3 * q) * 5e-3);
  return r;
}

}  // namespace

TEST(TopkCollectives, ReduceScatterAddsEachRanksTopInRankOrder) {
  const int P = size_of(), me = rank_of();
  const kernels::TopkCodec topk(0.1);
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, {}, {}, topk);
  const std::int64_t B = 160;
  View1<float> recv("recv", std::size_t(B));
  View1<float> residual = to_device(residual0(me, P * B));
  const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  auto r = g.ireduce_scatter(to_device(grads(me, P * B)), recv, 1, residual);
  parallel::data::DataGroup::wait(r);
  const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  std::vector<float> want(std::size_t(B), 0.0f);
  for (int q = 0; q < P; ++q) {
    const auto g_all = grads(q, P * B), r_all = residual0(q, P * B);
    const std::vector<float> gq(g_all.begin() + me * B, g_all.begin() + (me + 1) * B);
    const std::vector<float> rq(r_all.begin() + me * B, r_all.begin() + (me + 1) * B);
    const auto sent = sparsified(topk, gq, rq).first;
    for (std::int64_t i = 0; i < B; ++i) want[std::size_t(i)] += sent[std::size_t(i)];
  }
  if (P == 1) {
    // One rank sends nothing: its own gradient, residual untouched.
    EXPECT_EQ(to_host(recv), grads(0, B));
    EXPECT_EQ(to_host(residual), residual0(0, B));
    return;
  }
  EXPECT_EQ(to_host(recv), want);
  // This rank's residual: each destination block's rest.
  const auto g_me = grads(me, P * B), r_me = residual0(me, P * B);
  std::vector<float> owed;
  for (int j = 0; j < P; ++j) {
    const auto part = sparsified(topk, std::vector<float>(g_me.begin() + j * B, g_me.begin() + (j + 1) * B),
                                 std::vector<float>(r_me.begin() + j * B, r_me.begin() + (j + 1) * B))
                          .second;
    owed.insert(owed.end(), part.begin(), part.end());
  }
  EXPECT_EQ(to_host(residual), owed);
  // 16 of 160 values a block, 6 bytes each, against 4 bytes a value.
  EXPECT_DOUBLE_EQ(after.wire - before.wire, double(P - 1) * double(topk.words(B)) * 4);
  EXPECT_NEAR((after.wire - before.wire) / (after.logical - before.logical), 0.15, 1e-9);
}

TEST(TopkCollectives, AllreduceIsTheSameEverywhereAndRatioOneIsExact) {
  const int P = size_of(), me = rank_of();
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  const std::int64_t n = 1001;
  for (const double ratio : {0.05, 1.0}) {
    const kernels::TopkCodec topk(ratio);
    parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, {}, {}, topk);
    auto v = to_device(grads(me, n));
    View1<float> residual("residual", std::size_t(n));
    auto r = g.iallreduce(v, 0, residual);
    parallel::data::DataGroup::wait(r);
    const auto got = to_host(v);
    std::vector<float> want(std::size_t(n), 0.0f), dense(std::size_t(n), 0.0f);
    for (int q = 0; q < P; ++q) {
      const auto gq = grads(q, n);
      const auto sent = P == 1 ? gq : sparsified(topk, gq, std::vector<float>(std::size_t(n), 0.0f)).first;
      for (std::int64_t i = 0; i < n; ++i) {
        want[std::size_t(i)] += sent[std::size_t(i)];
        dense[std::size_t(i)] += gq[std::size_t(i)];
      }
    }
    EXPECT_EQ(got, want) << "ratio " << ratio;
    if (ratio == 1.0) {
      // Every value sent unchanged, nothing owed: the dense rank-order sum.
      EXPECT_EQ(got, dense);
      EXPECT_EQ(to_host(residual), std::vector<float>(std::size_t(n), 0.0f));
    }
    std::vector<float> rank0 = got;
    MPI_Bcast(rank0.data(), int(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(got, rank0);
  }
}

TEST(TopkCollectives, WarmupStepsAreDense) {
  const int P = size_of(), me = rank_of();
  const comm::ProcessGrid grid(comm::GridSizes{}, MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, false, 2, comm::Backend::Mpi, comm::Group::Data, {}, {}, kernels::TopkCodec(0.05),
                              2);
  const std::int64_t n = 300;
  for (std::int64_t step = 0; step < 3; ++step) {
    g.set_step(1, step);
    auto v = to_device(grads(me, n));
    View1<float> residual("residual", std::size_t(n));
    const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
    auto r = g.iallreduce(v, 0, residual);
    parallel::data::DataGroup::wait(r);
    const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
    if (P == 1) continue;
    // Dense while warming up: fp32 on the wire and nothing owed.
    const bool dense = step < 2;
    EXPECT_EQ(after.wire - before.wire < after.logical - before.logical, !dense) << "step " << step;
    double owed = 0;
    for (const float x : to_host(residual)) owed += std::abs(x);
    EXPECT_EQ(owed > 0, !dense) << "step " << step;
  }
}

// comm.compress_scope = "inter_node": hierarchical collectives encode their
// inter-node stage only. On one node nothing is encoded (the dense
// hierarchical result, bit for bit); with one rank a node the inter-node
// stage is the whole collective (the flat compressed result, bit for bit);
// in between every rank ends with the same values, near the exact sum.
// Outside the anonymous namespace: a test fixture's parameter type.
enum class Mode { BF16, Int8, Topk };

namespace {

comm::GridSizes nodes_of(int rpn) {
  comm::GridSizes s;
  s.ranks_per_node = rpn > 0 ? rpn : 1;
  return s;
}

// A group over the world with nodes of `rpn` ranks (0: flat), compressing
// as `m` says (`dense`: not at all). Collective.
struct Groups {
  Groups(Mode m, int rpn, bool dense)
      : grid(nodes_of(rpn), MPI_COMM_WORLD),
        group(grid, rpn > 0, 2, comm::Backend::Mpi, comm::Group::Data,
              dense || m == Mode::Topk ? WireCodec() : WireCodec(m == Mode::BF16 ? WireFormat::BF16 : WireFormat::Int8, 64),
              {}, !dense && m == Mode::Topk ? kernels::TopkCodec(0.1) : kernels::TopkCodec(), 0, rpn > 0 && !dense) {}
  comm::ProcessGrid grid;
  parallel::data::DataGroup group;
};

std::unique_ptr<Groups> make_group(Mode m, int rpn, bool dense = false) {
  return std::make_unique<Groups>(m, rpn, dense);
}

struct Result {
  std::vector<float> sum, residual;
};

Result allreduce(parallel::data::DataGroup& g, std::int64_t n) {
  auto v = to_device(grads(rank_of(), n));
  View1<float> residual = to_device(residual0(rank_of(), n));
  auto r = g.iallreduce(v, 0, g.sparse() ? residual : View1<float>());
  parallel::data::DataGroup::wait(r);
  return {to_host(v), to_host(residual)};
}

Result reduce_scatter(parallel::data::DataGroup& g, std::int64_t B) {
  const int P = size_of();
  View1<float> recv("recv", std::size_t(B));
  View1<float> residual = to_device(residual0(rank_of(), P * B));
  auto r = g.ireduce_scatter(to_device(grads(rank_of(), P * B)), recv, 1, g.sparse() ? residual : View1<float>());
  parallel::data::DataGroup::wait(r);
  return {to_host(recv), to_host(residual)};
}

}  // namespace

class InterNodeOnly : public ::testing::TestWithParam<Mode> {};

TEST_P(InterNodeOnly, OneNodeEncodesNothing) {
  const int P = size_of();
  auto scoped = make_group(GetParam(), P), dense = make_group(GetParam(), P, true);
  EXPECT_EQ(allreduce(scoped->group, 1001).sum, allreduce(dense->group, 1001).sum);
  EXPECT_EQ(reduce_scatter(scoped->group, 160).sum, reduce_scatter(dense->group, 160).sum);
}

TEST_P(InterNodeOnly, OneRankANodeIsTheFlatCompression) {
  auto scoped = make_group(GetParam(), 1), flat = make_group(GetParam(), 0);
  const auto a = allreduce(scoped->group, 1001), b = allreduce(flat->group, 1001);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.residual, b.residual);
  const auto c = reduce_scatter(scoped->group, 160), d = reduce_scatter(flat->group, 160);
  EXPECT_EQ(c.sum, d.sum);
  EXPECT_EQ(c.residual, d.residual);
}

TEST_P(InterNodeOnly, NodesOfSeveralRanksAgreeNearTheSum) {
  const int P = size_of();
  const int rpn = P % 2 == 0 && P > 2 ? P / 2 : P;  // 2 nodes of 2 at 4 ranks
  auto g = make_group(GetParam(), rpn);
  const std::int64_t n = 1001;
  const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  const auto got = allreduce(g->group, n).sum;
  const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::DpGrads)];
  std::vector<float> rank0 = got;
  MPI_Bcast(rank0.data(), int(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(got, rank0);
  if (GetParam() != Mode::Topk) {  // top-k sends a tenth: not near the sum in one step
    std::vector<double> exact(std::size_t(n), 0.0);
    for (int q = 0; q < P; ++q) {
      const auto x = grads(q, n);
      for (std::int64_t i = 0; i < n; ++i) exact[std::size_t(i)] += x[std::size_t(i)];
    }
    double big = 0;
    for (const double e : exact) big = std::max(big, std::abs(e));
    for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[std::size_t(i)], exact[std::size_t(i)], 4e-2 * big) << i;
  }
  // The ledger: fp32 on the node-local stages, encoded between the nodes.
  if (P > 1) {
    const int L = rpn, I = P / rpn;
    const std::int64_t B = (n + L - 1) / L;
    double inter = 0;
    if (I > 1) {
      inter = GetParam() == Mode::Topk
                  ? double(I - 1) * double(kernels::TopkCodec(0.1).words(B)) * 4
                  : 2.0 * (I - 1) *
                        double(WireCodec(GetParam() == Mode::BF16 ? WireFormat::BF16 : WireFormat::Int8, 64)
                                   .words((B + I - 1) / I)) * 4;
    }
    EXPECT_DOUBLE_EQ(after.wire - before.wire, 2.0 * (L - 1) * double(B) * 4 + inter);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, InterNodeOnly, ::testing::Values(Mode::BF16, Mode::Int8, Mode::Topk),
                         [](const auto& info) {
                           return std::string(info.param == Mode::BF16 ? "bf16" : info.param == Mode::Int8 ? "int8" : "topk");
                         });

// comm.weight_compression with hierarchical gathers: every rank ends with
// every part at its block index, decoded from its owner's encoding (scope
// "all": both stages encoded; "inter_node": only between nodes, so on one
// node the parts stay exact), the same everywhere; the ledger counts the
// encoded stages' words and the fp32 stages' values.
struct HierarchicalGather {
  WireFormat format;
  bool inter_node;
  int nodes_of_ranks;  // ranks per node: 0 = half the world (one node below 4 ranks)
};

class HierarchicalWeights : public ::testing::TestWithParam<HierarchicalGather> {};

TEST_P(HierarchicalWeights, EveryRankGetsEveryPartDecodedAlike) {
  const int P = size_of(), me = rank_of();
  const auto& p = GetParam();
  const int rpn = p.nodes_of_ranks > 0 ? p.nodes_of_ranks : (P % 2 == 0 && P > 2 ? P / 2 : P);
  const WireCodec codec(p.format, 64);
  const comm::ProcessGrid grid(nodes_of(rpn), MPI_COMM_WORLD);
  parallel::data::DataGroup g(grid, true, 2, comm::Backend::Mpi, comm::Group::Data, {}, codec, {}, 0, p.inter_node);
  std::vector<int> index(std::size_t(P), 0);
  const int mine = g.block_index();
  MPI_Allgather(&mine, 1, MPI_INT, index.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const std::int64_t B = 130;
  View1<float> recv("recv", std::size_t(P * B));
  const auto before = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::ZeroWeights)];
  auto r = g.iallgather(to_device(grads(me, B)), recv, 1);
  parallel::data::DataGroup::wait(r);
  const auto after = comm::TrafficLedger::totals()[std::size_t(comm::Traffic::ZeroWeights)];
  const auto got = to_host(recv);
  const int L = rpn, I = P / rpn;
  const bool encoded = P > 1 && (!p.inter_node || I > 1);
  for (int q = 0; q < P; ++q) {
    const auto want = encoded ? through(codec, grads(q, B)) : grads(q, B);
    for (std::int64_t i = 0; i < B; ++i)
      ASSERT_EQ(got[std::size_t(index[std::size_t(q)] * B + i)], want[std::size_t(i)])
          << "rank " << q << "'s part, element " << i;
  }
  const double W = double(codec.words(B));
  const double wire = p.inter_node ? (L - 1) * double(I) * double(B) * 4 + (I - 1) * W * 4 : (P - 1) * W * 4;
  EXPECT_DOUBLE_EQ(after.wire - before.wire, wire);
  EXPECT_DOUBLE_EQ(after.logical - before.logical, double(P - 1) * double(B) * 4);
}

INSTANTIATE_TEST_SUITE_P(
    Scopes, HierarchicalWeights,
    ::testing::Values(HierarchicalGather{WireFormat::Int8, false, 0}, HierarchicalGather{WireFormat::BF16, false, 0},
                      HierarchicalGather{WireFormat::Int8, true, 0}, HierarchicalGather{WireFormat::BF16, true, 0},
                      HierarchicalGather{WireFormat::Int8, true, 1}),
    [](const auto& info) {
      return std::string(kernels::wire_format_name(info.param.format)) +
             (info.param.inter_node ? "_inter_node" : "_all") + (info.param.nodes_of_ranks == 1 ? "_one_a_node" : "");
    });
