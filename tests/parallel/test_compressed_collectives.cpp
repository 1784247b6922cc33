// The data-parallel collectives with compression (comm.compression;
// parallel/data/data_group.hpp), at 1, 2 and 4 ranks:
//   - the int8 and bf16 reduce-scatter equals, bitwise, the fp32 sum in rank
//     order of every rank's decoded payload (what each rank sent);
//   - the compressed allreduce leaves the same values on every rank: the
//     decoded encoding of that reduce-scatter's sums;
//   - the bytes ledger counts the cut (wire over logical: 1/2 for bf16,
//     (1 + 4/Q)/4 for int8 in blocks of Q);
//   - the compressed parameter allgather (comm.weight_compression) gives
//     every rank every part decoded, its own too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "comm/process_grid.hpp"
#include "comm/traffic_ledger.hpp"
#include "harness/host_views.hpp"
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
