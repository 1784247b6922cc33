// The planner's topology (docs/planner.md, "Topology"): what a fat tree's
// oversubscribed leaves and a torus's shared links cost the collectives
// whose groups cross them (every group of a kind at once, the busiest link
// setting the pace), worked out by hand on small networks, the cost model
// charging it, and the cluster file's topology keys.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "plan/cost_model.hpp"
#include "plan/topology.hpp"

namespace {

using namespace exa;
using plan::Traffic;

plan::Topology tree(int per_switch, double oversubscription) {
  plan::Topology t;
  t.kind = "fat_tree";
  t.nodes_per_switch = per_switch;
  t.oversubscription = oversubscription;
  return t;
}

plan::Topology torus(std::vector<int> dims, double link_gbs = 0) {
  plan::Topology t;
  t.kind = "torus";
  t.torus_dims = std::move(dims);
  t.torus_link_gbs = link_gbs;
  return t;
}

TEST(Topology, FullBisectionCostsNothing) {
  plan::Topology flat;
  flat.kind = "flat";
  for (const auto& t : {flat, tree(0, 4), tree(2, 1), tree(8, 4)})
    for (const auto traffic : {Traffic::Ring, Traffic::AllToAll})
      EXPECT_EQ(plan::congestion(t, 32, 4, 10, 10, traffic, 32, 1), 1.0) << t.kind << " " << t.nodes_per_switch;
}

TEST(Topology, FatTreeChargesWhatLeavesTheLeaf) {
  // 8 nodes of 4 devices, 2 nodes (8 ranks) a leaf, 4:1 up to the spine.
  const auto t = tree(2, 4);
  // All-to-all over all 32 ranks: each sends 24 of its 31 peers' shares
  // out of its leaf; the uplink carries that at a quarter of the rate.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::AllToAll, 32, 1), 4.0 * 24 / 31);
  // At half the link's rate the uplink is half as loaded.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 5, Traffic::AllToAll, 32, 1), 2.0 * 24 / 31);
  // The ring over the same ranks leaves a leaf on 4 of its 32 edges: an
  // eighth of the traffic, well inside a quarter of the bandwidth.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Ring, 32, 1), 1.0);
  // Pipeline neighbours 8 ranks apart sit on different leaves, all of them
  // at once; 4 apart they share one.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Ring, 2, 8), 4.0);
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Ring, 2, 4), 1.0);
  // The ranks of one leaf's node slot: 4 leaves, one member each, so every
  // ring edge crosses.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Ring, 4, 8), 4.0);
  // A pipeline of 4 stages of one node each (ranks 0-3, 4-7, 8-11,
  // 12-15; the next pipeline on 16-31): its first and last boundaries
  // stay in a leaf, the middle one leaves it from half the leaf's devices.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Chain, 4, 4), 2.0);
  // A pipeline of one leaf a stage: a middle leaf sends its activations
  // up to the next leaf and its gradients up to the one before, two
  // flows a device through its uplink.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 32, 4, 10, 10, Traffic::Chain, 4, 8), 8.0);
  // 12 ranks, leaf 1 half used (ranks 8-11): a partly used leaf keeps its
  // switch's uplink. Pairs 6 apart ({0,6} ... {5,11}): 2-5 send across to
  // 8-11 and get their gradients back, 4 flows on each leaf's 8 devices'
  // uplink.
  EXPECT_DOUBLE_EQ(plan::congestion(t, 12, 4, 10, 10, Traffic::Chain, 2, 6), 2.0);
}

TEST(Topology, TorusChargesTheBusiestLink) {
  // A ring of 8 nodes, one device each at the link's rate.
  // Neighbours along it: one hop each, every link once.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({8}), 8, 1, 10, 10, Traffic::Ring, 8, 1), 1.0);
  // Pairs 3 apart on a ring of 12 ({0,3}, {1,4}, {2,5}, {6,9}, ...): 3
  // hops forward one way, 3 back the other; the link from node 2 to 3
  // carries the messages from 0, 1 and 2.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({12}), 12, 1, 10, 10, Traffic::Ring, 2, 3), 3.0);
  // Half the link bandwidth: twice the time.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({12}, 5), 12, 1, 10, 10, Traffic::Ring, 2, 3), 6.0);
  // All-to-all over the 8: from node 0, forward 1 + 2 + 3 hops and half of
  // the 4 to the opposite node, 8 hops over 7 peers a direction.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({8}), 8, 1, 10, 10, Traffic::AllToAll, 8, 1), 8.0 / 7);
  // Four devices a node, 32 ranks: 4 x 4 pairs of ranks per node pair over
  // 31 peers, 8 x 8 node pairs' forward hops over 32 members, on a link
  // carrying a node's 4 devices.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({8}), 32, 4, 10, 10, Traffic::AllToAll, 32, 1), 8.0 * 8 * 16 / 31 / 32);
  // A dimension of 2 is one link between its two nodes: the pair on
  // either end of dimension 1 of a 4 x 2 torus sends over it both ways.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({4, 2}), 8, 1, 10, 10, Traffic::Ring, 2, 4), 1.0);
  // 2-D: the 4 x 4 torus's first row rings along dimension 0, one hop.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({4, 4}), 16, 1, 10, 10, Traffic::Ring, 4, 1), 1.0);
  // Every other node of it ({0,2,4,6}, {1,3,5,7}, ...): half way round,
  // half each way, so each link along dimension 0 carries half a message
  // of each of the two rings of its row; along dimension 1 the step from
  // (2,0) to (0,1) and the wrap from (2,1) to (0,0) take one link each.
  EXPECT_DOUBLE_EQ(plan::congestion(torus({4, 4}), 16, 1, 10, 10, Traffic::Ring, 4, 2), 1.0);
  // More ranks than the torus holds: its shape is fixed, so no guess.
  EXPECT_THROW((void)plan::congestion(torus({4, 4}), 32, 1, 10, 10, Traffic::Ring, 4, 2), Error);
}

plan::Cluster four_nodes(const plan::Topology& t) {
  plan::Cluster c;
  c.nodes = 4;
  c.devices_per_node = 2;
  c.fp32_tflops = 1e6;
  c.memory_gib = 64;
  c.memory_bandwidth_gbs = 1e9;
  c.intra = {100, 0};
  c.inter = {1, 0};
  c.topology = t;
  return c;
}

// d 64, 4 heads, sequences of 32; `experts` routed experts of F 48, top 2
// (0: the model's own default).
model::ModelConfig small_model(std::int64_t layers, std::int64_t experts) {
  model::ModelConfig cfg;
  cfg.vocab_size = 256;
  cfg.d_model = 64;
  cfg.n_layers = layers;
  cfg.n_heads = 4;
  cfg.seq_len = 32;
  if (experts > 0) {
    cfg.n_experts = experts;
    cfg.top_k = 2;
    cfg.d_expert = 48;
  }
  return cfg;
}

TEST(Topology, CostModelChargesItsCollectives) {
  // ep 8 over 4 nodes of 2, leaves of 2 nodes at 4:1: the all-to-all
  // sends 4 of 7 peers' shares out of the leaf, so it takes 16/7 as long;
  // the data-parallel ring crosses leaves on 2 of 8 edges and keeps its
  // time.
  const auto cfg = small_model(2, 8);
  plan::Candidate c;
  c.grid = comm::GridSizes{8, 1, 1, 8, 1, 8, 0, 0};
  c.micro_batch = 1;
  c.grad_accum = 1;
  const auto full = plan::predict(cfg, c, four_nodes(tree(2, 1)));
  const auto tapered = plan::predict(cfg, c, four_nodes(tree(2, 4)));
  ASSERT_GT(full.a2a, 0);
  EXPECT_NEAR(tapered.a2a / full.a2a, 16.0 / 7, 1e-9);
  EXPECT_GT(tapered.step, full.step);
  // ep 1 (no all-to-all, so nothing else changes what hides the ring).
  c.grid.ep = 1;
  const auto ring_full = plan::predict(cfg, c, four_nodes(tree(2, 1)));
  const auto ring_tapered = plan::predict(cfg, c, four_nodes(tree(2, 4)));
  ASSERT_GT(ring_full.dp, 0);
  EXPECT_DOUBLE_EQ(ring_tapered.dp, ring_full.dp);
  EXPECT_DOUBLE_EQ(ring_tapered.step, ring_full.step);
}

TEST(Topology, APipelineIsAsSlowAsItsSlowestBoundary) {
  // pp 4 on 2 nodes of 2: stages 0|1 and 2|3 share a node, 1|2 does not,
  // and every stage waits for that boundary in the steady state.
  const auto cfg = small_model(4, 0);
  plan::Candidate c;
  c.grid = comm::GridSizes{4, 1, 1, 1, 4, 1, 0, 0};
  c.micro_batch = 1;
  c.grad_accum = 8;
  plan::Cluster one = four_nodes(tree(0, 1));
  one.nodes = 1;
  one.devices_per_node = 4;
  plan::Cluster two = one;
  two.nodes = 2;
  two.devices_per_node = 2;
  const auto a = plan::predict(cfg, c, one), b = plan::predict(cfg, c, two);
  ASSERT_GT(a.pp_p2p, 0);
  EXPECT_GT(b.pp_p2p, 10 * a.pp_p2p);
}

std::string write_cluster_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const char* kRest =
    "[device]\nfp32_tflops = 1\nmemory_gib = 8\nmemory_bandwidth_gbs = 10\n"
    "[intra_node]\nbandwidth_gbs = 10\n[inter_node]\nbandwidth_gbs = 1\n";

std::string error_of(const std::string& cluster_section) {
  try {
    (void)plan::load_cluster(write_cluster_file("topo.toml", cluster_section + kRest));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Topology, ClusterFileKeysAreCheckedAndKept) {
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\ntopology = \"torus\"\ntorus_dims = [4, 2]\n")
                .find("multiply to 8"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\ntopology = \"torus\"\n").find("torus_dims"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\ntopology = \"flat\"\noversubscription = 2\n")
                .find("oversubscription describes a fat_tree"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\noversubscribtion = 2\n").find("unknown key"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\noversubscription = 0.5\n").find("oversubscription"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\nnodes_per_switch = 17\n").find("nodes_per_switch"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster]\nnodes = 16\ndevices_per_node = 4\nnodes_per_switch = 2.5\n").find("whole number"),
            std::string::npos);
  // What to_toml writes, load_cluster reads back, wiring included.
  const auto t = plan::load_cluster(write_cluster_file(
      "torus.toml", std::string("[cluster]\nnodes = 16\ndevices_per_node = 4\ntopology = \"torus\"\ntorus_dims = [4, 2, 2]\n"
                                "torus_link_gbs = 25\n") + kRest));
  const auto t2 = plan::load_cluster(write_cluster_file("torus2.toml", plan::to_toml(t)));
  EXPECT_EQ(t2.topology.kind, "torus");
  EXPECT_EQ(t2.topology.torus_dims, (std::vector<int>{4, 2, 2}));
  EXPECT_DOUBLE_EQ(t2.topology.torus_link_gbs, 25);
  const auto f = plan::load_cluster(write_cluster_file(
      "tree.toml",
      std::string("[cluster]\nnodes = 16\ndevices_per_node = 4\nnodes_per_switch = 4\noversubscription = 2\n") + kRest));
  const auto f2 = plan::load_cluster(write_cluster_file("tree2.toml", plan::to_toml(f)));
  EXPECT_EQ(f2.topology.kind, "fat_tree");
  EXPECT_EQ(f2.topology.nodes_per_switch, 4);
  EXPECT_DOUBLE_EQ(f2.topology.oversubscription, 2);
}

}  // namespace
