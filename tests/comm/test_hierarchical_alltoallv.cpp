// Hierarchical all-to-all-v against the flat one (MPI_Ialltoallv through
// comm::Communicator) over pretend nodes and the real node, for the World,
// Data and Ep groups: random counts with zeros, a rank that sends nothing and
// one that receives nothing, all rows to one rank (skew), no rows at all;
// packed and scattered displacements. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#include "comm/process_grid.hpp"
#include "comm_views.hpp"
#include "hierarchical_setup.hpp"
#include "core/error.hpp"

namespace {

using namespace exa::comm;
using namespace exa::test;
using Ints = std::vector<int>;

// World over pretend nodes of every size and the detected node; at 2 and 4
// ranks Ep groups of 2 nodes × 2, 2 × 1 and 1 × 2 ranks and Data with tp = 2.
std::vector<GridLayout> layouts() {
  const int n = world_size();
  std::vector<GridLayout> out;
  for (int rpn : {1, 2, 4}) {
    if (n % rpn == 0) out.push_back({Group::World, 1, rpn});
  }
  out.push_back({Group::World, 1, 0});
  if (n == 2) {
    out.push_back({Group::Ep, 1, 1, 2});
    out.push_back({Group::Ep, 1, 2, 2});
  }
  if (n == 4) {
    out.push_back({Group::Ep, 1, 2, 4});  // 2 nodes × 2
    out.push_back({Group::Ep, 2, 2, 2});  // {0,2}, {1,3}: 2 nodes × 1
    out.push_back({Group::Ep, 1, 2, 2});  // {0,1}, {2,3}: 1 node × 2
    out.push_back({Group::Data, 2, 2});
  }
  return out;
}

// counts[s][d]: rows group rank s sends group rank d. The same on every rank.
using Matrix = std::vector<Ints>;
enum class Pattern { Random, SilentAndDeaf, Skew, Empty };
const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::Random: return "random";
    case Pattern::SilentAndDeaf: return "last sends nothing, first receives nothing";
    case Pattern::Skew: return "all to one";
    case Pattern::Empty: return "empty";
  }
  return "?";
}

Matrix counts(Pattern pat, int p, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 9);
  Matrix m(static_cast<std::size_t>(p), Ints(static_cast<std::size_t>(p), 0));
  const int hot = p / 2;
  for (int s = 0; s < p; ++s) {
    for (int d = 0; d < p; ++d) {
      const int r = pick(gen);
      switch (pat) {
        case Pattern::Random: m[s][d] = r < 3 ? 0 : r; break;
        case Pattern::SilentAndDeaf: m[s][d] = (s == p - 1 || d == 0) ? 0 : r + 1; break;
        case Pattern::Skew: m[s][d] = d == hot ? 20 + 2 * r : 0; break;
        case Pattern::Empty: break;
      }
    }
  }
  return m;
}

// Displacements for `c`: packed in rank order, or scattered (reverse rank
// order with a one-element gap before each chunk). Returns the extent.
std::size_t layout_displs(const Ints& c, bool scattered, Ints& d) {
  d.assign(c.size(), 0);
  int off = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const std::size_t q = scattered ? c.size() - 1 - i : i;
    off += scattered ? 1 : 0;
    d[q] = off;
    off += c[q];
  }
  return static_cast<std::size_t>(off) + 2;  // two trailing elements no count covers
}

// Row k from group rank s to group rank d: exact in float.
long value(int s, int d, int k) { return s * 4096 + d * 64 + k + 1; }

struct Case {
  Ints sc, sd, rc, rd;
  std::size_t send_n = 0, recv_n = 0;
};

Case make_case(const Matrix& m, int me, bool scattered) {
  Case c;
  const std::size_t p = m.size();
  c.sc.resize(p);
  c.rc.resize(p);
  for (std::size_t q = 0; q < p; ++q) {
    c.sc[q] = m[static_cast<std::size_t>(me)][q];
    c.rc[q] = m[q][static_cast<std::size_t>(me)];
  }
  c.send_n = layout_displs(c.sc, scattered, c.sd);
  c.recv_n = layout_displs(c.rc, !scattered, c.rd);  // the other layout on the receive side
  return c;
}

template <class T>
std::vector<T> send_buffer(const Case& c, int me) {
  std::vector<T> s(c.send_n, T(-5));
  for (std::size_t d = 0; d < c.sc.size(); ++d) {
    for (int k = 0; k < c.sc[d]; ++k) s[std::size_t(c.sd[d] + k)] = T(value(me, int(d), k));
  }
  return s;
}

template <class T>
class HierA2a : public ::testing::Test {};
using Types = ::testing::Types<float, std::int64_t>;
TYPED_TEST_SUITE(HierA2a, Types);

TEST(HierarchicalAlltoallv, PretendGroupsAreNodeMajor) {
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe() + " over " + group_name(l.over));
    EXPECT_TRUE(st.hc.nodes_aligned);
    EXPECT_TRUE(st.hc.flat_rank.empty()) << "flat rank != inter.rank() * local.size() + local.rank()";
    EXPECT_EQ(st.flat->size(), st.hc.local->size() * st.hc.inter->size());
    EXPECT_EQ(st.flat->rank(), st.hc.inter->rank() * st.hc.local->size() + st.hc.local->rank());
  }
}

TYPED_TEST(HierA2a, EqualsTheFlatAlltoallv) {
  using T = TypeParam;
  unsigned seed = 7;
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe() + " over " + group_name(l.over));
    const int p = st.flat->size(), me = st.flat->rank();
    for (Pattern pat : {Pattern::Random, Pattern::SilentAndDeaf, Pattern::Skew, Pattern::Empty}) {
      for (bool scattered : {false, true}) {
        for (bool poll : {false, true}) {
          SCOPED_TRACE(::testing::Message() << pattern_name(pat) << (scattered ? ", scattered" : ", packed")
                                            << (poll ? ", test()" : ", wait()"));
          const Case c = make_case(counts(pat, p, ++seed), me, scattered);
          const auto host = send_buffer<T>(c, me);
          auto send = make<T>(c.send_n, [&](long i) { return host[std::size_t(i)]; });
          auto want = make<T>(c.recv_n, [](long) { return -1; });
          auto got = make<T>(c.recv_n, [](long) { return -1; });
          st.flat->alltoallv(send, c.sc, c.sd, want, c.rc, c.rd);
          Request r = ihierarchical_alltoallv(st.hc, send, c.sc, c.sd, got, c.rc, c.rd);
          if (poll) {
            while (!r.test()) {
            }
          } else {
            r.wait();
          }
          // EXPECT, not ASSERT: a rank leaving the loop early would pair
          // its next collective with the other ranks' current one and hang.
          const auto g = to_vec(got), w = to_vec(want);
          EXPECT_EQ(g, w);
          // And against the formula, so a shared mistake cannot pass.
          int wrong = 0;
          for (int s = 0; s < p; ++s) {
            for (int k = 0; k < c.rc[s]; ++k) wrong += g[std::size_t(c.rd[s] + k)] != T(value(s, me, k));
          }
          EXPECT_EQ(wrong, 0);
          EXPECT_EQ(to_vec(send), host);
        }
      }
    }
  }
}

// Raw pointers through a pair whose flat group is not node-major: the group
// is the world in reverse, so HierarchicalComms::flat_rank is not the identity.
TYPED_TEST(HierA2a, FlatRanksAreMappedWhenNotNodeMajor) {
  using T = TypeParam;
  const int n = world_size();
  GridSizes s;
  s.ranks_per_node = n % 2 == 0 ? 2 : 1;
  ProcessGrid grid(s);
  MPI_Comm reversed = MPI_COMM_NULL;
  MPI_Comm_split(grid.comm(Group::World), 0, n - 1 - world_rank(), &reversed);
  auto flat = make_mpi_communicator(reversed);
  HierarchicalComms hc;
  hc.local = make_mpi_communicator(grid.comm(Group::NodeLocal));
  hc.inter = make_mpi_communicator(grid.comm(Group::InterNode));
  const int L = hc.local->size();
  for (int h = 0; h < n; ++h) hc.flat_rank.push_back(n - 1 - h);  // world rank h = h/L, h%L here
  EXPECT_EQ(world_rank(), hc.inter->rank() * L + hc.local->rank());
  const int me = flat->rank();
  const Case c = make_case(counts(Pattern::Random, n, 99), me, true);
  const auto send = send_buffer<T>(c, me);
  std::vector<T> want(c.recv_n, T(-1)), got(c.recv_n, T(-1));
  flat->alltoallv(send.data(), c.sc, c.sd, want.data(), c.rc, c.rd, dtype_of<T>());
  hierarchical_alltoallv(hc, send.data(), c.sc, c.sd, got.data(), c.rc, c.rd, dtype_of<T>());
  EXPECT_EQ(got, want);
  flat.reset();
  MPI_Comm_free(&reversed);
}

// An all-to-all and an allreduce in flight together, finished newest first.
TEST(HierarchicalAlltoallv, InFlightWithAnAllreduce) {
  for (const auto& l : layouts()) {
    auto& st = setup(l);
    SCOPED_TRACE(st.grid->describe() + " over " + group_name(l.over));
    const int p = st.flat->size(), me = st.flat->rank();
    const Case c = make_case(counts(Pattern::Random, p, 3), me, false);
    const auto host = send_buffer<double>(c, me);
    auto send = make<double>(c.send_n, [&](long i) { return host[std::size_t(i)]; });
    auto want = make<double>(c.recv_n, [](long) { return -1; });
    auto got = make<double>(c.recv_n, [](long) { return -1; });
    st.flat->alltoallv(send, c.sc, c.sd, want, c.rc, c.rd);
    auto sum = make<double>(5, [&](long k) { return me + k; });
    Request a = ihierarchical_alltoallv(st.hc, send, c.sc, c.sd, got, c.rc, c.rd);
    Request b = ihierarchical_allreduce(st.hc, sum);
    b.wait();
    a.wait();
    EXPECT_EQ(to_vec(got), to_vec(want));
    const auto s = to_vec(sum);
    for (long k = 0; k < 5; ++k) EXPECT_EQ(s[std::size_t(k)], double(p * (p - 1) / 2 + p * k));
  }
}

void expect_error(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "no exa::Error; expected one saying '" << words << "'";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(HierarchicalAlltoallv, BadLayoutsAreNamed) {
  auto& st = setup({Group::World, 1, world_size() % 2 == 0 ? 2 : 1});
  const std::size_t p = static_cast<std::size_t>(st.flat->size());
  std::vector<float> buf(4 * p + 4);
  const Ints zeros(p, 0), short_(p - 1, 0);
  Ints negative(p, 0), big(p, 0);
  negative[p - 1] = -1;
  big[0] = static_cast<int>(buf.size());
  auto raw = [&](const Ints& sc, const Ints& rd) {
    return [&st, &buf, sc, rd, zeros]() {
      ihierarchical_alltoallv(st.hc, buf.data(), sc, zeros, buf.data(), zeros, rd, DType::F32);
    };
  };
  expect_error(raw(short_, zeros), "one entry per rank");
  expect_error(raw(zeros, negative), "recv_displs[" + std::to_string(p - 1) + "] = -1 is negative");
  DView<float> send("send", 4), recv("recv", 4);
  expect_error([&]() { ihierarchical_alltoallv(st.hc, send, big, zeros, recv, zeros, zeros); },
               "send_displs[0] + send_counts[0]");
  expect_error([&]() { ihierarchical_alltoallv(st.hc, send, zeros, zeros, recv, zeros, big); },
               "does not fit the recv View's 4 elements");
}

}  // namespace
