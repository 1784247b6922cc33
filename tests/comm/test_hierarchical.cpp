// Hierarchical reduce-scatter and allgather (ZeRO sharding) against the flat
// collectives, over pretend nodes of 1, 2 and 4 ranks and the real node, for
// the World and Data groups. Values are small integers (also as floats) so
// every sum is exact whatever the summation order. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <set>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/mpi_env.hpp"
#include "comm/process_grid.hpp"
#include "comm_views.hpp"
#include "hierarchical_setup.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace {

using namespace exa::comm;

using namespace exa::test;

// Completes `r` either by wait() or by polling test(), the way a training
// step overlaps it with compute.
void complete(Request& r, bool poll) {
  if (poll) {
    while (!r.test()) {
    }
    EXPECT_TRUE(r.done());
  } else {
    r.wait();
  }
}

// Element j of the flat buffer contributed by the group's rank q.
long value(int q, long j) { return (q + 1) * (j % 23) - 7 * q + 3; }

// World over pretend nodes of 1, 2, 4 ranks and the real node (detected: all
// ranks here, so one node); Data with tp = 2 at 4 ranks (1 or 2 members per node).
std::vector<GridLayout> layouts() {
  const int n = world_size();
  std::vector<GridLayout> out;
  for (int rpn : {1, 2, 4}) {
    if (n % rpn != 0) continue;
    out.push_back({Group::World, 1, rpn});
    if (n == 4 && rpn > 1) out.push_back({Group::Data, 2, rpn});
  }
  out.push_back({Group::World, 1, 0});
  return out;
}

template <class T>
class Hier : public ::testing::Test {};
using Types = ::testing::Types<float, double, std::int64_t>;
TYPED_TEST_SUITE(Hier, Types);

TEST(Hierarchical, BlockIndexIsAPermutation) {
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size();
    ASSERT_EQ(p, st.hc.local->size() * st.hc.inter->size());
    std::vector<std::int64_t> all(p, -1);
    std::int64_t mine = static_cast<std::int64_t>(hierarchical_block_index(st.hc));
    st.flat->allgather(&mine, all.data(), 1, DType::I64);
    std::set<std::int64_t> seen(all.begin(), all.end());
    EXPECT_EQ(seen.size(), std::size_t(p));
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), p - 1);
  }
}

TYPED_TEST(Hier, ReduceScatterIsTheFlatSumOfTheOwnBlock) {
  using T = TypeParam;
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size(), q = st.flat->rank();
    const long idx = static_cast<long>(hierarchical_block_index(st.hc));
    for (long block : {0L, 1L, 7L}) {
      for (bool poll : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "block " << block << (poll ? " test()" : " wait()"));
        auto send = make<T>(p * block, [&](long j) { return value(q, j); });
        DView<T> recv("recv", block);
        Request r = ihierarchical_reduce_scatter(st.hc, send, recv);
        complete(r, poll);
        const auto got = to_vec(recv);
        for (long k = 0; k < block; ++k) {
          long want = 0;
          for (int s = 0; s < p; ++s) want += value(s, idx * block + k);
          ASSERT_EQ(got[k], T(want)) << k;
        }
        // The input is left as it was.
        const auto sent = to_vec(send);
        for (long j = 0; j < p * block; ++j) ASSERT_EQ(sent[j], T(value(q, j))) << j;
      }
    }
  }
}

TYPED_TEST(Hier, AllgatherPutsEveryBlockAtItsIndex) {
  using T = TypeParam;
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size();
    const long idx = static_cast<long>(hierarchical_block_index(st.hc));
    for (long block : {0L, 1L, 7L}) {
      for (bool poll : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "block " << block << (poll ? " test()" : " wait()"));
        auto send = make<T>(block, [&](long k) { return idx * 100 + k + 1; });
        DView<T> recv("recv", p * block);
        Kokkos::deep_copy(recv, T(-1));
        Request r = ihierarchical_allgather(st.hc, send, recv);
        complete(r, poll);
        const auto got = to_vec(recv);
        for (long b = 0; b < p; ++b) {
          for (long k = 0; k < block; ++k) ASSERT_EQ(got[b * block + k], T(b * 100 + k + 1)) << b << " " << k;
        }
      }
    }
  }
}

TYPED_TEST(Hier, ReduceScatterThenAllgatherIsTheFlatAllreduce) {
  using T = TypeParam;
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size(), q = st.flat->rank();
    for (long block : {1L, 13L}) {
      for (bool poll : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "block " << block << (poll ? " test()" : " wait()"));
        auto f = [&](long j) { return value(q, j); };
        auto flat = make<T>(p * block, f);
        st.flat->allreduce(flat);
        auto grads = make<T>(p * block, f);
        DView<T> shard("shard", block), full("full", p * block);
        Request r = ihierarchical_reduce_scatter(st.hc, grads, shard);
        complete(r, poll);
        r = ihierarchical_allgather(st.hc, shard, full);
        complete(r, poll);
        EXPECT_EQ(to_vec(full), to_vec(flat));
      }
    }
  }
}

// Raw host pointers (the MPI backend's memory), each in place: the shard is
// this rank's own block of the flat buffer, as a ZeRO engine keeps it.
TYPED_TEST(Hier, InPlaceOnTheOwnBlock) {
  using T = TypeParam;
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size(), q = st.flat->rank();
    const long idx = static_cast<long>(hierarchical_block_index(st.hc));
    const long block = 5;
    std::vector<T> buf(p * block), flat(p * block);
    for (long j = 0; j < p * block; ++j) buf[j] = flat[j] = T(value(q, j));
    st.flat->allreduce(flat.data(), flat.data(), flat.size(), dtype_of<T>());
    T* own = buf.data() + idx * block;
    Request r = ihierarchical_reduce_scatter(*st.hc.local, *st.hc.inter, buf.data(), own, block, dtype_of<T>());
    complete(r, true);
    for (long k = 0; k < block; ++k) ASSERT_EQ(own[k], flat[idx * block + k]) << k;
    // Poison everything else: the allgather must fill it from the other ranks.
    for (long j = 0; j < p * block; ++j) {
      if (j / block != idx) buf[j] = T(-99);
    }
    r = ihierarchical_allgather(*st.hc.local, *st.hc.inter, own, buf.data(), block, dtype_of<T>());
    complete(r, false);
    EXPECT_EQ(buf, flat);
  }
}

TEST(Hierarchical, OverlappingBuffersAreRejected) {
  auto& st = setup({Group::World, 1, world_size() % 2 == 0 ? 2 : 1});
  const int p = st.flat->size();
  const std::size_t block = 4, idx = hierarchical_block_index(st.hc);
  std::vector<float> buf(p * block + 1);
  // One element past this rank's block: overlaps send but is not the block.
  float* wrong = buf.data() + idx * block + 1;
  EXPECT_THROW(ihierarchical_reduce_scatter(*st.hc.local, *st.hc.inter, buf.data(), wrong, block, DType::F32),
               exa::Error);
  EXPECT_THROW(ihierarchical_allgather(*st.hc.local, *st.hc.inter, wrong, buf.data(), block, DType::F32),
               exa::Error);
  DView<float> big("big", p * block + 1), small("small", block);
  EXPECT_THROW(ihierarchical_reduce_scatter(st.hc, big, small), std::invalid_argument);
  EXPECT_THROW(ihierarchical_allgather(st.hc, small, big), std::invalid_argument);
}

// Several operations in flight at once, as a ZeRO step has them: reduce-
// scatters, allgathers and allreduces, finished in an order other than the
// one they were started in (polled newest first, or waited newest first).
// Their later stages complete at different moments on different ranks; the
// results must still pair each operation's stages across ranks.
TEST(Hierarchical, SeveralInFlightInAnyOrder) {
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe());
    const int p = st.flat->size(), q = st.flat->rank();
    const long idx = static_cast<long>(hierarchical_block_index(st.hc)), block = 6;
    for (int mode = 0; mode < 2; ++mode) {
      SCOPED_TRACE(mode == 0 ? "polled newest first" : "waited newest first");
      constexpr int kOps = 6;  // op b: b % 3 == 0 reduce-scatter, 1 allgather, 2 allreduce
      std::vector<DView<double>> in, out;
      std::vector<Request> rs;
      for (int b = 0; b < kOps; ++b) {
        if (b % 3 == 1) {
          in.push_back(make<double>(block, [&](long k) { return idx * 100 + k + b; }));
          out.emplace_back("out", p * block);
          rs.push_back(ihierarchical_allgather(st.hc, in.back(), out.back()));
        } else if (b % 3 == 0) {
          in.push_back(make<double>(p * block, [&](long j) { return value(q, j) + b; }));
          out.emplace_back("out", block);
          rs.push_back(ihierarchical_reduce_scatter(st.hc, in.back(), out.back()));
        } else {
          in.push_back(make<double>(p * block + 1, [&](long j) { return value(q, j) + b; }));
          out.push_back(in.back());
          rs.push_back(ihierarchical_allreduce(st.hc, in.back()));
        }
      }
      if (mode == 0) {
        for (bool all = false; !all;) {
          all = true;
          for (int b = kOps - 1; b >= 0; --b) all = rs[b].test() && all;
        }
      } else {
        for (int b = kOps - 1; b >= 0; --b) rs[b].wait();
      }
      for (int b = 0; b < kOps; ++b) {
        SCOPED_TRACE(b);
        const auto got = to_vec(out[b]);
        if (b % 3 == 1) {
          for (long j = 0; j < p * block; ++j) ASSERT_EQ(got[j], double((j / block) * 100 + j % block + b)) << j;
        } else {
          const long off = b % 3 == 0 ? idx * block : 0;
          for (long k = 0; k < static_cast<long>(got.size()); ++k) {
            long want = 0;
            for (int r = 0; r < p; ++r) want += value(r, off + k) + b;
            ASSERT_EQ(got[k], double(want)) << k;
          }
        }
      }
    }
  }
}

TEST(Hierarchical, NcclSkipsWithoutGpu) {
  if (!nccl_available()) GTEST_SKIP() << "no NCCL in this build or no GPU visible";
  const int n = world_size();
  GridSizes s;
  s.ranks_per_node = n % 2 == 0 ? 2 : 1;
  ProcessGrid g(s);
  auto flat = make_mpi_communicator(MPI_COMM_WORLD);
  auto hc = make_hierarchical(g, Group::World, Backend::Nccl);
  const int q = flat->rank();
  const long block = 9;
  auto f = [&](long j) { return value(q, j); };
  auto want = make<float>(n * block, f), grads = make<float>(n * block, f);
  flat->allreduce(want);
  DView<float> shard("shard", block), full("full", n * block);
  Request r = ihierarchical_reduce_scatter(hc, grads, shard);
  complete(r, true);
  hierarchical_allgather(hc, shard, full);
  EXPECT_EQ(to_vec(full), to_vec(want));
}

}  // namespace
