#include "comm/process_grid.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"

namespace exa::comm {

namespace {

std::string divisors_of(long n) {
  std::string out;
  for (long d = 1; d <= n; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

MPI_Comm split(MPI_Comm parent, int color, int key) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(parent, color, key, &c);
  return c;
}

// True when `part` has the same size on every rank of `over` (collective).
bool same_size_everywhere(MPI_Comm part, MPI_Comm over) {
  const int n = comm_size(part);
  int mm[2] = {n, -n};
  MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, over);
  return mm[0] == -mm[1];
}

}  // namespace

const char* group_name(Group g) {
  switch (g) {
    case Group::World: return "world";
    case Group::Tp: return "tp";
    case Group::Cp: return "cp";
    case Group::Dp: return "dp";
    case Group::Pp: return "pp";
    case Group::Data: return "data (dp*cp)";
    case Group::Ep: return "ep";
    case Group::ExpertData: return "expert-data";
    case Group::NodeLocal: return "node-local";
    case Group::InterNode: return "inter-node";
    case Group::DataNodeLocal: return "data node-local";
    case Group::DataInterNode: return "data inter-node";
    case Group::EpNodeLocal: return "ep node-local";
    case Group::EpInterNode: return "ep inter-node";
  }
  return "?";
}

GridSizes resolve_grid_sizes(GridSizes s) {
  EXA_REQUIRE(s.world >= 1, "process grid: world size {} must be at least 1", s.world);
  const std::pair<const char*, int> dims[] = {{"tp", s.tp}, {"cp", s.cp}, {"pp", s.pp}, {"ep", s.ep}};
  for (const auto& [name, v] : dims) {
    EXA_REQUIRE(v >= 1, "parallel.{} = {} must be at least 1", name, v);
  }
  EXA_REQUIRE(s.dp >= 0, "parallel.dp = {} must be at least 1 (or 0 to infer it)", s.dp);
  EXA_REQUIRE(s.ranks_per_node >= 0, "parallel.ranks_per_node = {} must be at least 1 (or 0 to detect it)",
              s.ranks_per_node);
  const long pct = long(s.pp) * s.cp * s.tp;
  if (s.dp == 0) {
    EXA_REQUIRE(s.world % pct == 0,
                "parallel.pp*cp*tp = {}*{}*{} = {} does not divide the world size {}, so parallel.dp = 0 "
                "cannot be inferred; run on a multiple of {} ranks or change pp, cp or tp",
                s.pp, s.cp, s.tp, pct, s.world, pct);
    s.dp = static_cast<int>(s.world / pct);
  }
  const long prod = pct * s.dp;
  if (prod != s.world) {
    const std::string fix = s.world % pct == 0
                                ? fmt::format("set parallel.dp = {} (or 0 to infer it), or run on {} ranks",
                                              s.world / pct, prod)
                                : fmt::format("run on {} ranks, or change the layout", prod);
    throw Error(fmt::format("parallel.pp*dp*cp*tp = {}*{}*{}*{} = {} does not equal the world size {}; {}", s.pp,
                            s.dp, s.cp, s.tp, prod, s.world, fix));
  }
  const long dpcp = long(s.dp) * s.cp;
  EXA_REQUIRE(dpcp % s.ep == 0,
              "parallel.ep = {} does not divide dp*cp = {}*{} = {}; expert parallelism is carved out of the data- "
              "and context-parallel ranks: choose ep from {}",
              s.ep, s.dp, s.cp, dpcp, divisors_of(dpcp));
  EXA_REQUIRE(s.ranks_per_node == 0 || s.world % s.ranks_per_node == 0,
              "parallel.ranks_per_node = {} does not divide the world size {}; every pretend node holds the same "
              "number of ranks: choose ranks_per_node from {}, or 0 to detect the nodes",
              s.ranks_per_node, s.world, divisors_of(s.world));
  return s;
}

ProcessGrid::ProcessGrid(const GridSizes& sizes, MPI_Comm parent) {
  comms_.fill(MPI_COMM_NULL);
  const int world = comm_size(parent);
  EXA_REQUIRE(sizes.world == 0 || sizes.world == world,
              "process grid: sizes name a world of {} ranks but the communicator has {}; run on {} ranks", sizes.world,
              world, sizes.world);
  GridSizes s = sizes;
  s.world = world;
  sizes_ = resolve_grid_sizes(s);
  const int tp = sizes_.tp, cp = sizes_.cp, dp = sizes_.dp, ep = sizes_.ep;

  GridCoords& c = coords_;
  c.world = comm_rank(parent);
  c.tp = c.world % tp;
  c.cp = (c.world / tp) % cp;
  c.dp = (c.world / (tp * cp)) % dp;
  c.pp = c.world / (tp * cp * dp);
  c.data = c.dp * cp + c.cp;
  c.ep = c.data % ep;
  c.expert_data = c.data / ep;
  const int ndata = dp * cp;

  auto& k = comms_;
  MPI_Comm_dup(parent, &k[int(Group::World)]);
  MPI_Comm w = k[int(Group::World)];
  k[int(Group::Tp)] = split(w, c.world / tp, c.tp);
  k[int(Group::Cp)] = split(w, (c.pp * dp + c.dp) * tp + c.tp, c.cp);
  k[int(Group::Dp)] = split(w, (c.pp * cp + c.cp) * tp + c.tp, c.dp);
  k[int(Group::Pp)] = split(w, c.world % (tp * cp * dp), c.pp);
  const int data_color = c.pp * tp + c.tp;
  k[int(Group::Data)] = split(w, data_color, c.data);
  k[int(Group::Ep)] = split(w, data_color * (ndata / ep) + c.expert_data, c.ep);
  k[int(Group::ExpertData)] = split(w, data_color * ep + c.ep, c.expert_data);

  // Nodes.
  if (sizes_.ranks_per_node > 0) {
    c.node = c.world / sizes_.ranks_per_node;
    k[int(Group::NodeLocal)] = split(w, c.node, c.world);
  } else {
    MPI_Comm_split_type(w, MPI_COMM_TYPE_SHARED, c.world, MPI_INFO_NULL, &k[int(Group::NodeLocal)]);
  }
  MPI_Comm local = k[int(Group::NodeLocal)];
  c.local = comm_rank(local);
  ranks_per_node_ = comm_size(local);
  k[int(Group::InterNode)] = split(w, c.local, c.world);
  if (sizes_.ranks_per_node == 0) {
    // Node index: the rank of this node's leader among the leaders (local index 0).
    int leader_index = c.local == 0 ? comm_rank(k[int(Group::InterNode)]) : 0;
    MPI_Bcast(&leader_index, 1, MPI_INT, 0, local);
    c.node = leader_index;
  }
  int is_leader = c.local == 0 ? 1 : 0;
  MPI_Allreduce(&is_leader, &num_nodes_, 1, MPI_INT, MPI_SUM, w);
  nodes_uniform_ = same_size_everywhere(local, w);

  MPI_Comm data = k[int(Group::Data)];
  k[int(Group::DataNodeLocal)] = split(data, c.node, c.data);
  const int data_local = comm_rank(k[int(Group::DataNodeLocal)]);
  k[int(Group::DataInterNode)] = split(data, data_local, c.data);
  data_nodes_uniform_ = same_size_everywhere(k[int(Group::DataNodeLocal)], w);

  // Keyed by node index, not Ep rank: with detected nodes whose ranks are not
  // contiguous the two orders differ, and the all-to-all relies on every
  // EpInterNode group listing the nodes alike (docs/architecture.md).
  MPI_Comm epc = k[int(Group::Ep)];
  k[int(Group::EpNodeLocal)] = split(epc, c.node, c.ep);
  k[int(Group::EpInterNode)] = split(epc, comm_rank(k[int(Group::EpNodeLocal)]), c.node);
  ep_nodes_uniform_ = same_size_everywhere(k[int(Group::EpNodeLocal)], w);
}

GridSizes grid_sizes_from_deck(const deck::Config& cfg) {
  GridSizes s;
  s.world = cfg.layout_world_size();
  s.tp = static_cast<int>(cfg.get_int("parallel.tp"));
  s.cp = static_cast<int>(cfg.get_int("parallel.cp"));
  s.dp = static_cast<int>(cfg.get_int("parallel.dp"));
  s.pp = static_cast<int>(cfg.get_int("parallel.pp"));
  s.ep = static_cast<int>(cfg.get_int("parallel.ep"));
  s.etp = static_cast<int>(cfg.get_int("parallel.etp"));
  s.ranks_per_node = static_cast<int>(cfg.get_int("parallel.ranks_per_node"));
  return s;
}

ProcessGrid ProcessGrid::from_deck(const deck::Config& cfg, MPI_Comm comm) {
  const int world = comm_size(comm);
  EXA_REQUIRE(cfg.layout_world_size() == world,
              "{}: the deck's layout was checked for {} ranks but the run has {}; load it with the run's world size",
              cfg.deck_path(), cfg.layout_world_size(), world);
  return ProcessGrid(grid_sizes_from_deck(cfg), comm);
}

ProcessGrid::ProcessGrid(ProcessGrid&& o) noexcept
    : sizes_(o.sizes_),
      coords_(o.coords_),
      ranks_per_node_(o.ranks_per_node_),
      num_nodes_(o.num_nodes_),
      nodes_uniform_(o.nodes_uniform_),
      data_nodes_uniform_(o.data_nodes_uniform_),
      ep_nodes_uniform_(o.ep_nodes_uniform_),
      comms_(o.comms_) {
  o.comms_.fill(MPI_COMM_NULL);
}

ProcessGrid::~ProcessGrid() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& c : comms_) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
}

int ProcessGrid::size(Group g) const { return comm_size(comm(g)); }
int ProcessGrid::rank(Group g) const { return comm_rank(comm(g)); }

std::string ProcessGrid::describe() const {
  return fmt::format("world {} = pp {} × dp {} × cp {} × tp {}, ep {}, {} node{} × {} rank{}{}", sizes_.world,
                     sizes_.pp, sizes_.dp, sizes_.cp, sizes_.tp, sizes_.ep, num_nodes_, num_nodes_ == 1 ? "" : "s",
                     ranks_per_node_, ranks_per_node_ == 1 ? "" : "s",
                     nodes_pretended() ? " (pretend)" : (nodes_uniform_ ? "" : " (uneven)"));
}

}  // namespace exa::comm
