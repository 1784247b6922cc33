// exa::comm::Communicator (MPI backend; NCCL where built and a GPU exists):
// every collective, blocking and nonblocking, against hand-computed results,
// and the hierarchical allreduce against the flat one. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/mpi_env.hpp"
#include "comm/process_grid.hpp"
#include "comm_views.hpp"
#include "core/types.hpp"

namespace {

using namespace exa::comm;

using namespace exa::test;

template <class T>
class CommTyped : public ::testing::Test {};
using Types = ::testing::Types<float, double, std::int64_t>;
TYPED_TEST_SUITE(CommTyped, Types);

TYPED_TEST(CommTyped, AllreduceBlockingAndNonblocking) {
  using T = TypeParam;
  const int r = world_rank(), n = world_size();
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  EXPECT_EQ(c->rank(), r);
  EXPECT_EQ(c->size(), n);
  for (bool nonblocking : {false, true}) {
    auto v = make<T>(37, [&](long i) { return (r + 1) * (i + 1); });
    if (nonblocking) {
      Request h = c->iallreduce(v);
      while (!h.test()) {
      }
      EXPECT_TRUE(h.done());
    } else {
      c->allreduce(v);
    }
    const auto got = to_vec(v);
    for (long i = 0; i < 37; ++i) EXPECT_EQ(got[i], T(n * (n + 1) / 2 * (i + 1))) << i;
  }
  // Max, raw typed pointers, separate send and recv.
  std::vector<T> s(5), out(5, T(-1));
  for (int i = 0; i < 5; ++i) s[i] = T((r * 7 + i) % 5);
  c->allreduce(s.data(), out.data(), 5, ReduceOp::Max);
  for (int i = 0; i < 5; ++i) {
    T m = 0;
    for (int q = 0; q < n; ++q) m = std::max(m, T((q * 7 + i) % 5));
    EXPECT_EQ(out[i], m);
  }
}

TYPED_TEST(CommTyped, ReduceScatterAndAllgather) {
  using T = TypeParam;
  const int r = world_rank(), n = world_size();
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  const long block = 3;
  for (bool nonblocking : {false, true}) {
    auto send = make<T>(n * block, [&](long j) { return r * 1000 + j; });
    DView<T> recv("recv", block);
    if (nonblocking) {
      c->ireduce_scatter(send, recv).wait();
    } else {
      c->reduce_scatter(send, recv);
    }
    const auto got = to_vec(recv);
    for (long k = 0; k < block; ++k) EXPECT_EQ(got[k], T(1000 * n * (n - 1) / 2 + n * (r * block + k)));

    auto mine = make<T>(block, [&](long k) { return r * 100 + k; });
    DView<T> all("all", n * block);
    if (nonblocking) {
      c->iallgather(mine, all).wait();
    } else {
      c->allgather(mine, all);
    }
    const auto g = to_vec(all);
    for (long q = 0; q < n; ++q) {
      for (long k = 0; k < block; ++k) EXPECT_EQ(g[q * block + k], T(q * 100 + k));
    }
  }
  // In-place allgather on host memory: this rank's block already in place.
  std::vector<T> buf(n * block, T(-1));
  for (long k = 0; k < block; ++k) buf[r * block + k] = T(r * 10 + k);
  c->allgather(buf.data() + r * block, buf.data(), block, dtype_of<T>());
  for (long q = 0; q < n; ++q) {
    for (long k = 0; k < block; ++k) EXPECT_EQ(buf[q * block + k], T(q * 10 + k));
  }
}

TYPED_TEST(CommTyped, AlltoallvBroadcastSendRecv) {
  using T = TypeParam;
  const int r = world_rank(), n = world_size();
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  // r sends (r + 2q) % 3 + 1 elements r*1000 + q*10 + k to q.
  auto cnt = [](int from, int to) { return (from + 2 * to) % 3 + 1; };
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  int st = 0, rt = 0;
  for (int q = 0; q < n; ++q) {
    sc[q] = cnt(r, q), sd[q] = st, st += sc[q];
    rc[q] = cnt(q, r), rd[q] = rt, rt += rc[q];
  }
  HView<T> hs("hs", st);
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k < sc[q]; ++k) hs(sd[q] + k) = T(r * 1000 + q * 10 + k);
  }
  DView<T> s("s", st), recv("recv", rt);
  Kokkos::deep_copy(s, hs);
  for (bool nonblocking : {false, true}) {
    Kokkos::deep_copy(recv, T(-1));
    if (nonblocking) {
      Request h = c->ialltoallv(s, sc, sd, recv, rc, rd);
      h.wait();
    } else {
      c->alltoallv(s, sc, sd, recv, rc, rd);
    }
    const auto got = to_vec(recv);
    for (int q = 0; q < n; ++q) {
      for (int k = 0; k < rc[q]; ++k) EXPECT_EQ(got[rd[q] + k], T(q * 1000 + r * 10 + k)) << q << " " << k;
    }
  }

  const int root = n - 1;
  for (bool nonblocking : {false, true}) {
    auto b = make<T>(11, [&](long i) { return r == root ? 7 * i + 1 : 0; });
    if (nonblocking) {
      c->ibroadcast(b, root).wait();
    } else {
      c->broadcast(b, root);
    }
    const auto got = to_vec(b);
    for (long i = 0; i < 11; ++i) EXPECT_EQ(got[i], T(7 * i + 1));
  }

  // Ring: receive from the left, send to the right (to itself at one rank).
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto out = make<T>(4, [&](long i) { return r * 10 + i; });
  DView<T> in("in", 4);
  Request rr = c->irecv(in, left, 5);
  Request sr = c->isend(out, right, 5);
  sr.wait();
  rr.wait();
  auto got = to_vec(in);
  for (long i = 0; i < 4; ++i) EXPECT_EQ(got[i], T(left * 10 + i));
  // Blocking pair (ordered so that it cannot deadlock at 2 ranks).
  DView<T> in2("in2", 4);
  if (n == 1) {
    Request a = c->irecv(in2, 0, 6);
    c->send(out, 0, 6);
    a.wait();
  } else if (r % 2 == 0) {
    c->send(out, right, 6);
    c->recv(in2, left, 6);
  } else {
    c->recv(in2, left, 6);
    c->send(out, right, 6);
  }
  got = to_vec(in2);
  for (long i = 0; i < 4; ++i) EXPECT_EQ(got[i], T(left * 10 + i));
}

TEST(Communicator, BarrierAndRequests) {
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  c->barrier();
  Request b = c->ibarrier();
  b.wait();
  EXPECT_TRUE(b.done());
  Request none;
  EXPECT_TRUE(none.done());
  EXPECT_TRUE(none.test());
  // Several in flight at once, completed together.
  std::vector<DView<double>> vs;
  std::vector<Request> rs;
  for (int k = 0; k < 4; ++k) {
    vs.push_back(make<double>(9, [&](long i) { return k + i; }));
    rs.push_back(c->iallreduce(vs.back()));
  }
  wait_all(rs);
  for (int k = 0; k < 4; ++k) {
    const auto got = to_vec(vs[k]);
    for (long i = 0; i < 9; ++i) EXPECT_EQ(got[i], double(world_size() * (k + i)));
  }
  EXPECT_STREQ(c->backend(), "mpi");
  EXPECT_FALSE(c->device_memory());
}

TEST(Communicator, SubCommunicatorOfTheGrid) {
  const int n = world_size();
  GridSizes s;
  s.tp = n >= 2 ? 2 : 1;
  ProcessGrid g(s);
  auto tp = make_mpi_communicator(g.comm(Group::Tp));
  auto dp = make_mpi_communicator(g.comm(Group::Dp));
  auto v = make<std::int64_t>(3, [&](long i) { return world_rank() + i; });
  tp->allreduce(v);
  dp->allreduce(v);
  const auto got = to_vec(v);
  for (long i = 0; i < 3; ++i) EXPECT_EQ(got[i], std::int64_t(n * (n - 1) / 2 + n * i));
}

// Hierarchical == flat, for pretend nodes of 1, 2 and 4 ranks and odd counts.
template <class T>
void check_hierarchical(Group over, const GridSizes& s) {
  const int r = world_rank();
  // Communicator creation is slow on an oversubscribed machine: build each
  // layout's communicators once and share them across the typed tests.
  struct Setup {
    std::unique_ptr<ProcessGrid> grid;
    std::unique_ptr<Communicator> flat;
    HierarchicalComms hc;
  };
  static std::map<std::tuple<int, int, int>, Setup> cache;
  auto& st = cache[{static_cast<int>(over), s.tp, s.ranks_per_node}];
  if (!st.grid) {
    st.grid = std::make_unique<ProcessGrid>(s);
    st.flat = make_mpi_communicator(st.grid->comm(over));
    st.hc = make_hierarchical(*st.grid, over);
  }
  SCOPED_TRACE(st.grid->describe());
  auto& flat = st.flat;
  auto& hc = st.hc;
  for (long count : {1L, 13L, 64L, 1001L}) {
    SCOPED_TRACE(count);
    auto fq = [](int q, long i) {
      if constexpr (std::is_integral_v<T>) {
        return (q + 3) * (i * 7919 % 1013) - 500;
      } else {
        return std::sin(0.37 * i + q) * (1 + q) * 1e3;
      }
    };
    auto f = [&](long i) { return fq(r, i); };
    auto a = make<T>(count, f), b = make<T>(count, f);
    flat->allreduce(a);
    hierarchical_allreduce(hc, b);
    auto c = make<T>(count, f);
    Request h = ihierarchical_allreduce(hc, c);
    while (!h.test()) {
    }
    const auto x = to_vec(a), y = to_vec(b), z = to_vec(c);
    for (long i = 0; i < count; ++i) {
      if constexpr (std::is_integral_v<T>) {
        ASSERT_EQ(x[i], y[i]) << i;
        ASSERT_EQ(x[i], z[i]) << i;
      } else {
        // Summation order differs: 1e-6 relative to the sum of magnitudes.
        double mag = 0;
        for (int q = 0; q < world_size(); ++q) mag += std::abs(double(fq(q, i)));
        const double tol = 1e-6 * mag;
        ASSERT_NEAR(double(x[i]), double(y[i]), tol) << i;
        ASSERT_NEAR(double(x[i]), double(z[i]), tol) << i;
      }
    }
  }
}

TYPED_TEST(CommTyped, HierarchicalMatchesFlat) {
  const int n = world_size();
  for (int rpn : {1, 2, 4}) {
    if (n % rpn != 0) continue;
    GridSizes s;
    s.ranks_per_node = rpn;
    check_hierarchical<TypeParam>(Group::World, s);
    if (n == 4 && rpn > 1) {
      s.tp = 2;  // Data = {0,2},{1,3}: 1 (rpn 2) or 2 (rpn 4) members per pretend node
      check_hierarchical<TypeParam>(Group::Data, s);
    }
  }
  GridSizes detect;  // ranks_per_node = 0: the real node (all ranks here)
  check_hierarchical<TypeParam>(Group::World, detect);
}

TEST(Communicator, NcclSkipsWithoutGpu) {
  if (!nccl_available()) GTEST_SKIP() << "no NCCL in this build or no GPU visible";
  const int r = world_rank(), n = world_size();
  auto c = make_nccl_communicator(MPI_COMM_WORLD);
  EXPECT_STREQ(c->backend(), "nccl");
  auto v = make<float>(33, [&](long i) { return (r + 1) * (i + 1); });
  c->iallreduce(v).wait();
  const auto got = to_vec(v);
  for (long i = 0; i < 33; ++i) EXPECT_EQ(got[i], float(n * (n + 1) / 2 * (i + 1)));
  auto send = make<double>(n * 2, [&](long j) { return r * 1000 + j; });
  DView<double> recv("recv", 2), all("all", n * 2);
  c->reduce_scatter(send, recv);
  c->allgather(recv, all);
  const auto ag = to_vec(all);
  for (long j = 0; j < n * 2; ++j) EXPECT_EQ(ag[j], double(1000 * n * (n - 1) / 2 + n * j));
  c->barrier();
  GridSizes s;
  s.ranks_per_node = n % 2 == 0 ? 2 : 1;
  ProcessGrid g(s);
  auto hc = make_hierarchical(g, Group::World, Backend::Nccl);
  auto h = make<std::int64_t>(13, [&](long i) { return r * 13 + i; });
  hierarchical_allreduce(hc, h);
  const auto hg = to_vec(h);
  for (long i = 0; i < 13; ++i) EXPECT_EQ(hg[i], std::int64_t(13 * n * (n - 1) / 2 + n * i));
}

}  // namespace
