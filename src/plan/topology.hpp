#pragma once
// How a cluster's nodes are wired, and what it costs a collective whose
// group spans nodes (docs/planner.md, "Topology").
//
// The cost model charges a collective between nodes at the per-device
// inter-node bandwidth. That is what it reaches when nothing in the network
// is shared: one non-blocking switch, or a fat tree with full bisection.
// Two wirings share links, and `congestion` says by how much the collective
// slows down when every group of its kind in the world runs it at once, as
// the layouts' collectives do:
// - a fat tree whose leaf switches (nodes_per_switch nodes each) have less
//   bandwidth up to the spine than down to their nodes (oversubscription);
// - a torus of nodes, where a message travels over the links of every
//   node between its ends.
#include <cstdint>
#include <string>
#include <vector>

namespace exa::plan {

struct Topology {
  std::string kind = "fat_tree";  // flat | fat_tree | torus
  // fat_tree: nodes under one leaf switch (0: one switch holds every
  // node), and the leaf's bandwidth down to its nodes over its bandwidth up
  // to the spine (1: full bisection).
  int nodes_per_switch = 0;
  double oversubscription = 1;
  // torus: nodes along each dimension (their product is the node count),
  // node n at coordinates with the first dimension varying fastest; and the
  // bandwidth of one link in one direction (0: a node's injection, its
  // devices times the inter-node bandwidth per device).
  std::vector<int> torus_dims;
  double torus_link_gbs = 0;
};

// One line for reports: "fat tree, 4:1 above leaves of 16 nodes", "torus 8 x 8 x 4".
std::string describe(const Topology& t);

// Neighbour exchanges in a ring (ring allreduce, reduce-scatter and
// allgather, the context-parallel ring: member i sends to member i + 1,
// the last to the first), in a chain (the pipeline's stages: member i to
// i + 1, the last to no one, and the gradients back from i + 1 to i: on a
// torus the links' other direction, on a fat tree the receiving leaf's
// uplink too), and all-to-all (every member sends to every other alike).
enum class Traffic { Ring, Chain, AllToAll };

// At least 1: the factor by which a collective over groups of `size` ranks
// at world stride `stride` runs slower than at `rate_gbs`, the rate each
// rank's sends reach in it without congestion, when every such group of
// `world` ranks (as the rank order makes them, ranks filling nodes in
// order) runs it at once and the busiest shared link sets the pace. A
// torus must hold the world (exa::Error otherwise); a fat tree has as many
// leaves as the world fills, each with its whole switch's uplink. The nodes hold `devices_per_node`
// devices, each with `device_gbs` of inter-node bandwidth (the fat tree's
// leaf has that many times its devices down, over the oversubscription
// up; a torus link, unless given, a node's).
double congestion(const Topology& t, std::int64_t world, int devices_per_node, double device_gbs, double rate_gbs,
                  Traffic traffic, int size, int stride);

}  // namespace exa::plan
