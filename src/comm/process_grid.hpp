#pragma once
// exa::comm::ProcessGrid: the parallel layout of docs/architecture.md ("Parallel layout")
// as MPI communicators.
//
//   world = pp × dp × cp × tp, rank order tp fastest, then cp, dp, pp (Megatron):
//     world_rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank
//
// Groups (each a communicator this grid owns and frees):
//   Tp, Cp, Dp, Pp   ranks differing only in that coordinate
//   Data             dp × cp (the ZeRO / data-parallel group), rank = dp_rank*cp + cp_rank
//   Ep               ep consecutive members of the Data group (expert parallelism
//                    is carved out of dp·cp); ep_rank = data_rank % ep
//   ExpertData       the dp·cp/ep Data members with the same ep_rank (the replicas of
//                    an EP rank, over which expert gradients are reduced)
//   NodeLocal        ranks on the same node (MPI_Comm_split_type SHARED, or pretend
//                    nodes of ranks_per_node consecutive ranks)
//   InterNode        ranks with the same node-local index, one per node
//   DataNodeLocal    Data ∩ NodeLocal;   DataInterNode: Data members with the same
//                    DataNodeLocal index (the pair serves hierarchical Data collectives)
//   EpNodeLocal      Ep ∩ NodeLocal;     EpInterNode: Ep members with the same
//                    EpNodeLocal index, ordered by node index (the pair serves the
//                    hierarchical expert all-to-all, which needs every inter-node
//                    group to list the nodes in the same order)
#include <mpi.h>

#include <array>
#include <string>

namespace exa::deck {
class Config;
}

namespace exa::comm {

struct GridSizes {
  int world = 0;           // 0 = the size of the communicator the grid is built on
  int tp = 1, cp = 1, dp = 0, pp = 1;  // dp = 0: infer world / (tp*cp*pp)
  int ep = 1;
  int ranks_per_node = 0;  // 0 = detect (MPI_Comm_split_type); > 0 = pretend nodes
  int etp = 0;             // expert tensor parallelism: 0 = tp, else a divisor of tp (routed experts' F split etp ways)
};

// Checks `s` (with s.world > 0) and returns it with dp resolved. Throws
// exa::Error naming the numbers and the fix when a size is < 1, the product
// differs from the world size, ep does not divide dp*cp, or ranks_per_node
// does not divide the world size. Needs no MPI.
GridSizes resolve_grid_sizes(GridSizes s);

// The deck's [parallel] tp, cp, dp, pp, ep and ranks_per_node for
// cfg.world_size() ranks, unresolved (dp may be 0). Needs no MPI, so
// `examoe --check --ranks N` checks a layout without N ranks.
GridSizes grid_sizes_from_deck(const deck::Config& cfg);

enum class Group {
  World,
  Tp,
  Cp,
  Dp,
  Pp,
  Data,
  Ep,
  ExpertData,
  NodeLocal,
  InterNode,
  DataNodeLocal,
  DataInterNode,
  EpNodeLocal,
  EpInterNode,
};
inline constexpr int kNumGroups = 14;
const char* group_name(Group g);

// This rank's coordinates.
struct GridCoords {
  int world = 0;
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int data = 0;         // dp*cp + cp: rank in the Data group
  int ep = 0;           // data % ep
  int expert_data = 0;  // data / ep
  int node = 0;         // node index (pretend: world / ranks_per_node; detected: order of first rank)
  int local = 0;        // rank within the node
};

class ProcessGrid {
 public:
  // Collective over `comm`. `sizes.world` must be 0 or comm's size.
  explicit ProcessGrid(const GridSizes& sizes, MPI_Comm comm = MPI_COMM_WORLD);
  // The deck's [parallel] tp, cp, dp, pp, ep, ranks_per_node.
  static ProcessGrid from_deck(const deck::Config& cfg, MPI_Comm comm = MPI_COMM_WORLD);
  ~ProcessGrid();
  ProcessGrid(ProcessGrid&& other) noexcept;
  ProcessGrid& operator=(ProcessGrid&&) = delete;
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridSizes& sizes() const { return sizes_; }  // resolved (dp > 0, world > 0)
  const GridCoords& coords() const { return coords_; }
  int ranks_per_node() const { return ranks_per_node_; }  // detected or pretended (node-local size)
  int num_nodes() const { return num_nodes_; }
  bool nodes_pretended() const { return sizes_.ranks_per_node > 0; }
  // True when every node holds the same number of ranks (always when pretended),
  // and likewise for the Data group's share of each node: the condition for the
  // hierarchical collectives over (NodeLocal, InterNode) / (DataNodeLocal, DataInterNode)
  // / (EpNodeLocal, EpInterNode).
  bool nodes_uniform() const { return nodes_uniform_; }
  bool data_nodes_uniform() const { return data_nodes_uniform_; }
  bool ep_nodes_uniform() const { return ep_nodes_uniform_; }

  MPI_Comm comm(Group g) const { return comms_[static_cast<int>(g)]; }
  int size(Group g) const;
  int rank(Group g) const;

  // "world 4 = pp 1 × dp 2 × cp 1 × tp 2, ep 1, 2 nodes × 2 ranks (pretend)"
  std::string describe() const;

 private:
  GridSizes sizes_;
  GridCoords coords_;
  int ranks_per_node_ = 1, num_nodes_ = 1;
  bool nodes_uniform_ = true, data_nodes_uniform_ = true, ep_nodes_uniform_ = true;
  std::array<MPI_Comm, kNumGroups> comms_;
};

}  // namespace exa::comm
