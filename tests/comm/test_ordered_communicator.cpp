// exa::comm::OrderedCommunicator, the test double with NCCL's ordering
// rules: receives match sends in posting order whatever the tags, a send
// completes only once its receive has started, isendrecv's halves run
// together, and a posting order that would deadlock on NCCL is reported
// (as an exa::Error) instead of hanging. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/ordered_communicator.hpp"
#include "comm_views.hpp"
#include "core/error.hpp"

namespace {

using namespace exa::comm;
using namespace exa::test;

TEST(OrderedCommunicator, MatchesInPostingOrderWhateverTheTags) {
  const int r = world_rank(), n = world_size();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  OrderedCommunicator c(MPI_COMM_WORLD);
  EXPECT_TRUE(c.ordered());
  auto a = make<double>(3, [&](long i) { return 100 * r + i; });
  auto b = make<double>(3, [&](long i) { return 100 * r + 50 + i; });
  DView<double> x("x", 3), y("y", 3);
  // MPI would match x with the left's b (tag 6): here x gets a, y gets b.
  Request first = c.isendrecv(a, right, x, left, 5);
  Request second = c.isendrecv(b, right, y, left, 6);
  second.wait();
  EXPECT_TRUE(first.test());  // it ran ahead of the second
  const auto gx = to_vec(x), gy = to_vec(y);
  for (long i = 0; i < 3; ++i) {
    EXPECT_EQ(gx[i], 100.0 * left + i);
    EXPECT_EQ(gy[i], 100.0 * left + 50 + i);
  }
  // Collectives queue behind point-to-point and run in order too.
  auto s = make<double>(4, [&](long i) { return r + i; });
  Request sum = c.iallreduce(s);
  c.barrier();
  EXPECT_TRUE(sum.test());
  const auto gs = to_vec(s);
  for (long i = 0; i < 4; ++i) EXPECT_EQ(gs[i], double(n * (n - 1) / 2 + n * i));
}

TEST(OrderedCommunicator, ASendCompletesOnlyOnceItsReceiveStarts) {
  const int r = world_rank(), n = world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  OrderedCommunicator c(MPI_COMM_WORLD);
  auto v = make<float>(5, [&](long i) { return 3 * i + 1; });
  if (r == 0) {
    Request s = c.isend(v, 1, 0);
    // Rank 1 posts its receive only after the barrier below, so the send
    // cannot have completed yet, however long we look.
    for (int k = 0; k < 20; ++k) {
      EXPECT_FALSE(s.test());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    s.wait();
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 1) {
      DView<float> got("got", 5);
      c.recv(got, 0, 0);
      const auto g = to_vec(got);
      for (long i = 0; i < 5; ++i) EXPECT_EQ(g[i], float(3 * i + 1));
    }
  }
}

TEST(OrderedCommunicator, ACrossedOrderIsReportedAsANcclDeadlock) {
  const int r = world_rank(), n = world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // Pairs (0, 1), (2, 3): each rank queues its receive ahead of its send,
  // which MPI allows and NCCL's one stream does not.
  OrderedCommunicator c(MPI_COMM_WORLD, 0.5);
  const int peer = r ^ 1;
  if (peer >= n) return;  // an odd rank count's last rank sits out
  auto out = make<int>(2, [&](long i) { return r + int(i); });
  DView<int> in("in", 2);
  Request rcv = c.irecv(in, peer, 0);
  Request snd = c.isend(out, peer, 0);
  try {
    rcv.wait();
    FAIL() << "the crossed order completed";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock on NCCL"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(snd.test());  // abandoned with the rest of the queue
}

}  // namespace
