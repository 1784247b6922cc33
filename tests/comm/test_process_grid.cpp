// exa::comm::ProcessGrid: coordinates and group membership for the layouts a
// world size allows, pretend and detected nodes, and the exact messages for
// impossible layouts. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/process_grid.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"

namespace {

using exa::comm::GridSizes;
using exa::comm::Group;
using exa::comm::ProcessGrid;
using Partition = std::vector<std::vector<int>>;  // each group's world ranks, in group-rank order

int world_rank() { return exa::comm_rank(MPI_COMM_WORLD); }
int world_size() { return exa::comm_size(MPI_COMM_WORLD); }

std::vector<int> members(MPI_Comm c) {
  const int n = exa::comm_size(c);
  std::vector<int> out(static_cast<std::size_t>(n));
  int me = world_rank();
  MPI_Allgather(&me, 1, MPI_INT, out.data(), 1, MPI_INT, c);
  return out;
}

std::vector<int> group_of(const Partition& p, int r) {
  for (const auto& g : p) {
    for (int x : g) {
      if (x == r) return g;
    }
  }
  return {};
}

Partition singletons(int n) {
  Partition p;
  for (int r = 0; r < n; ++r) p.push_back({r});
  return p;
}
Partition all(int n) {
  std::vector<int> g;
  for (int r = 0; r < n; ++r) g.push_back(r);
  return {g};
}

GridSizes sz(int tp, int cp, int dp, int pp, int ep, int rpn) {
  GridSizes s;
  s.tp = tp, s.cp = cp, s.dp = dp, s.pp = pp, s.ep = ep, s.ranks_per_node = rpn;
  return s;
}

struct Layout {
  const char* name;
  GridSizes sizes;
  std::map<Group, Partition> groups;
  // coords per world rank: {tp, cp, dp, pp, data, ep, expert_data, node, local}
  std::vector<std::vector<int>> coords;
};

void check_layout(const Layout& L) {
  SCOPED_TRACE(L.name);
  const int r = world_rank();
  ProcessGrid g(L.sizes);
  for (const auto& [grp, part] : L.groups) {
    SCOPED_TRACE(exa::comm::group_name(grp));
    EXPECT_EQ(members(g.comm(grp)), group_of(part, r));
    EXPECT_EQ(g.size(grp), static_cast<int>(group_of(part, r).size()));
  }
  EXPECT_EQ(members(g.comm(Group::World)), all(world_size())[0]);
  const auto& c = g.coords();
  const std::vector<int> got = {c.tp, c.cp, c.dp, c.pp, c.data, c.ep, c.expert_data, c.node, c.local};
  EXPECT_EQ(got, L.coords[static_cast<std::size_t>(r)]);
  EXPECT_EQ(c.world, r);
  EXPECT_EQ(g.rank(Group::Data), c.data);
  EXPECT_EQ(g.rank(Group::Ep), c.ep);
  EXPECT_EQ(g.rank(Group::ExpertData), c.expert_data);
  EXPECT_EQ(g.rank(Group::NodeLocal), c.local);
  EXPECT_TRUE(g.ep_nodes_uniform());
}

std::vector<Layout> layouts(int n) {
  std::vector<Layout> out;
  if (n == 1) {
    out.push_back({"single", sz(1, 1, 0, 1, 1, 1), {{Group::Tp, {{0}}}, {Group::Data, {{0}}}, {Group::InterNode, {{0}}}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0}}});
  }
  if (n == 2) {
    out.push_back({"tp2 rpn1",
                   sz(2, 1, 1, 1, 1, 1),
                   {{Group::Tp, all(2)}, {Group::Dp, singletons(2)}, {Group::Data, singletons(2)},
                    {Group::NodeLocal, singletons(2)}, {Group::InterNode, all(2)},
                    {Group::DataNodeLocal, singletons(2)}, {Group::DataInterNode, singletons(2)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 1, 0}}});
    out.push_back({"cp2 ep2 rpn2",
                   sz(1, 2, 1, 1, 2, 2),
                   {{Group::Cp, all(2)}, {Group::Data, all(2)}, {Group::Ep, all(2)},
                    {Group::ExpertData, singletons(2)}, {Group::NodeLocal, all(2)}, {Group::InterNode, singletons(2)},
                    {Group::EpNodeLocal, all(2)}, {Group::EpInterNode, singletons(2)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 1, 1, 0, 0, 1}}});
    out.push_back({"pp2",
                   sz(1, 1, 1, 2, 1, 1),
                   {{Group::Pp, all(2)}, {Group::Dp, singletons(2)}, {Group::Data, singletons(2)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 1, 0, 0, 0, 1, 0}}});
  }
  if (n == 4) {
    const Partition lo_hi = {{0, 1}, {2, 3}}, even_odd = {{0, 2}, {1, 3}};
    out.push_back({"tp2 x dp2, rpn2",
                   sz(2, 1, 2, 1, 1, 2),
                   {{Group::Tp, lo_hi}, {Group::Dp, even_odd}, {Group::Cp, singletons(4)}, {Group::Pp, singletons(4)},
                    {Group::Data, even_odd}, {Group::Ep, singletons(4)}, {Group::ExpertData, even_odd},
                    {Group::NodeLocal, lo_hi}, {Group::InterNode, even_odd},
                    {Group::DataNodeLocal, singletons(4)}, {Group::DataInterNode, even_odd},
                    {Group::EpNodeLocal, singletons(4)}, {Group::EpInterNode, singletons(4)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                    {1, 0, 0, 0, 0, 0, 0, 0, 1},
                    {0, 0, 1, 0, 1, 0, 1, 1, 0},
                    {1, 0, 1, 0, 1, 0, 1, 1, 1}}});
    out.push_back({"dp2 x pp2, rpn1",
                   sz(1, 1, 2, 2, 1, 1),
                   {{Group::Dp, lo_hi}, {Group::Pp, even_odd}, {Group::Tp, singletons(4)}, {Group::Data, lo_hi},
                    {Group::NodeLocal, singletons(4)}, {Group::InterNode, all(4)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                    {0, 0, 1, 0, 1, 0, 1, 1, 0},
                    {0, 0, 0, 1, 0, 0, 0, 2, 0},
                    {0, 0, 1, 1, 1, 0, 1, 3, 0}}});
    out.push_back({"cp2 x dp2, ep2, rpn4",
                   sz(1, 2, 2, 1, 2, 4),
                   {{Group::Cp, lo_hi}, {Group::Dp, even_odd}, {Group::Data, all(4)}, {Group::Ep, lo_hi},
                    {Group::ExpertData, even_odd}, {Group::NodeLocal, all(4)}, {Group::InterNode, singletons(4)},
                    {Group::DataNodeLocal, all(4)}, {Group::EpNodeLocal, lo_hi}, {Group::EpInterNode, singletons(4)}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                    {0, 1, 0, 0, 1, 1, 0, 0, 1},
                    {0, 0, 1, 0, 2, 0, 1, 0, 2},
                    {0, 1, 1, 0, 3, 1, 1, 0, 3}}});
    out.push_back({"dp4, ep4, rpn2",
                   sz(1, 1, 0, 1, 4, 2),
                   {{Group::Dp, all(4)}, {Group::Ep, all(4)}, {Group::ExpertData, singletons(4)},
                    {Group::NodeLocal, lo_hi}, {Group::InterNode, even_odd}, {Group::DataNodeLocal, lo_hi},
                    {Group::DataInterNode, even_odd}, {Group::EpNodeLocal, lo_hi}, {Group::EpInterNode, even_odd}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                    {0, 0, 1, 0, 1, 1, 0, 0, 1},
                    {0, 0, 2, 0, 2, 2, 0, 1, 0},
                    {0, 0, 3, 0, 3, 3, 0, 1, 1}}});
    out.push_back({"dp4, ep2",
                   sz(1, 1, 4, 1, 2, 1),
                   {{Group::Ep, lo_hi}, {Group::ExpertData, even_odd}, {Group::EpNodeLocal, singletons(4)},
                    {Group::EpInterNode, lo_hi}},
                   {{0, 0, 0, 0, 0, 0, 0, 0, 0},
                    {0, 0, 1, 0, 1, 1, 0, 1, 0},
                    {0, 0, 2, 0, 2, 0, 1, 2, 0},
                    {0, 0, 3, 0, 3, 1, 1, 3, 0}}});
  }
  return out;
}

TEST(ProcessGrid, LayoutsForThisWorldSize) {
  const auto ls = layouts(world_size());
  ASSERT_FALSE(ls.empty());
  for (const auto& L : ls) check_layout(L);
}

TEST(ProcessGrid, MegatronRankOrderRoundTrips) {
  const int n = world_size();
  ProcessGrid g(sz(1, 1, 0, 1, 1, 0));
  const auto& s = g.sizes();
  EXPECT_EQ(s.world, n);
  EXPECT_EQ(s.dp, n);
  const auto& c = g.coords();
  EXPECT_EQ(((c.pp * s.dp + c.dp) * s.cp + c.cp) * s.tp + c.tp, world_rank());
}

TEST(ProcessGrid, DetectedNodesAreOneMachine) {
  // Every rank of this test runs on one host: one node holding all of them.
  const int n = world_size();
  ProcessGrid g(sz(1, 1, 0, 1, 1, 0));
  EXPECT_FALSE(g.nodes_pretended());
  EXPECT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.ranks_per_node(), n);
  EXPECT_TRUE(g.nodes_uniform());
  EXPECT_EQ(members(g.comm(Group::NodeLocal)), all(n)[0]);
  EXPECT_EQ(g.size(Group::InterNode), 1);
  EXPECT_EQ(g.coords().node, 0);
  EXPECT_EQ(g.coords().local, world_rank());
}

TEST(ProcessGrid, FromDeck) {
  const int n = world_size();
  const auto cfg =
      exa::deck::Config::from_text("[parallel]\nranks_per_node = 1\n", "grid.toml", {}, n);
  ProcessGrid g = ProcessGrid::from_deck(cfg);
  EXPECT_EQ(g.sizes().dp, n);
  EXPECT_EQ(g.num_nodes(), n);
  EXPECT_EQ(g.describe(), fmt::format("world {} = pp 1 × dp {} × cp 1 × tp 1, ep 1, {} node{} × 1 rank (pretend)", n,
                                      n, n, n == 1 ? "" : "s"));
}

std::string error_of(const GridSizes& s) {
  try {
    exa::comm::resolve_grid_sizes(s);
  } catch (const exa::Error& e) {
    return e.what();
  }
  return "(no error)";
}

GridSizes world(int w, GridSizes s) {
  s.world = w;
  return s;
}

TEST(ProcessGrid, ErrorMessagesNameNumbersAndFix) {
  EXPECT_EQ(error_of(world(4, sz(2, 1, 4, 1, 1, 0))),
            "parallel.pp*dp*cp*tp = 1*4*1*2 = 8 does not equal the world size 4; set parallel.dp = 2 (or 0 to infer "
            "it), or run on 8 ranks");
  EXPECT_EQ(error_of(world(5, sz(2, 1, 1, 1, 1, 0))),
            "parallel.pp*dp*cp*tp = 1*1*1*2 = 2 does not equal the world size 5; run on 2 ranks, or change the layout");
  EXPECT_EQ(error_of(world(4, sz(3, 1, 0, 1, 1, 0))),
            "parallel.pp*cp*tp = 1*1*3 = 3 does not divide the world size 4, so parallel.dp = 0 cannot be inferred; "
            "run on a multiple of 3 ranks or change pp, cp or tp");
  EXPECT_EQ(error_of(world(6, sz(1, 1, 3, 2, 2, 0))),
            "parallel.ep = 2 does not divide dp*cp = 3*1 = 3; expert parallelism is carved out of the data- and "
            "context-parallel ranks: choose ep from 1, 3");
  EXPECT_EQ(error_of(world(4, sz(1, 1, 0, 1, 1, 3))),
            "parallel.ranks_per_node = 3 does not divide the world size 4; every pretend node holds the same number "
            "of ranks: choose ranks_per_node from 1, 2, 4, or 0 to detect the nodes");
  EXPECT_EQ(error_of(world(4, sz(0, 1, 0, 1, 1, 0))), "parallel.tp = 0 must be at least 1");
  EXPECT_EQ(error_of(world(4, sz(1, 1, 0, 1, 1, 0))), "(no error)");
  EXPECT_EQ(exa::comm::resolve_grid_sizes(world(8, sz(2, 1, 0, 2, 1, 0))).dp, 2);
}

TEST(ProcessGrid, ErrorWhenTheLayoutDoesNotFitThisWorld) {
  const int n = world_size();
  GridSizes s = sz(1, 1, n + 1, 1, 1, 0);
  try {
    ProcessGrid g(s);
    FAIL() << "expected exa::Error";
  } catch (const exa::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("parallel.pp*dp*cp*tp = 1*{}*1*1 = {} does not equal the world size {}; set parallel.dp = "
                          "{} (or 0 to infer it), or run on {} ranks",
                          n + 1, n + 1, n, n, n + 1));
  }
  s = sz(1, 1, 0, 1, 1, 0);
  s.world = n + 2;
  try {
    ProcessGrid g(s);
    FAIL() << "expected exa::Error";
  } catch (const exa::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("process grid: sizes name a world of {} ranks but the communicator has {}; run on {} ranks",
                          n + 2, n, n + 2));
  }
}

}  // namespace
