#include "plan/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

namespace exa::plan {

namespace {

// The node of each member of the group holding rank 0.
std::vector<std::int64_t> member_nodes(int size, int stride, int devices_per_node) {
  std::vector<std::int64_t> n(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) n[std::size_t(i)] = std::int64_t(i) * stride / devices_per_node;
  return n;
}

// Share of the members' traffic that leaves their leaf switch.
double leaf_share(const std::vector<std::int64_t>& nodes, int per_switch, Traffic traffic) {
  const std::size_t p = nodes.size();
  auto leaf = [&](std::size_t i) { return nodes[i] / per_switch; };
  if (traffic == Traffic::Ring) {
    std::size_t crossing = 0;
    for (std::size_t i = 0; i < p; ++i) crossing += leaf(i) != leaf((i + 1) % p) ? 1 : 0;
    return double(crossing) / double(p);
  }
  // All-to-all: a member in a leaf of c members sends (p - c) / (p - 1) of
  // its bytes out; over the members, (p^2 - sum c^2) / (p (p - 1)).
  std::map<std::int64_t, double> members;
  for (std::size_t i = 0; i < p; ++i) members[leaf(i)] += 1;
  double same = 0;
  for (const auto& [l, c] : members) same += c * c;
  return (double(p) * double(p) - same) / (double(p) * double(p - 1));
}

// Hops a message from node a to node b takes along each dimension and
// direction of the torus (minimal routing; half the way round goes half
// each way, except on a dimension of 2, whose two neighbours are one node
// and one link), added to `hops` times `weight`.
void add_route(const std::vector<int>& dims, std::int64_t a, std::int64_t b, double weight,
               std::vector<std::array<double, 2>>& hops) {
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const std::int64_t d = dims[k];
    const std::int64_t ak = a % d, bk = b % d;
    a /= d;
    b /= d;
    const std::int64_t delta = ((bk - ak) % d + d) % d;
    if (delta == 0) continue;
    if (2 * delta < d || d == 2) {
      hops[k][0] += weight * double(delta);
    } else if (2 * delta > d) {
      hops[k][1] += weight * double(d - delta);
    } else {
      hops[k][0] += weight * double(delta) / 2;
      hops[k][1] += weight * double(delta) / 2;
    }
  }
}

// Every node sends devices_per_node members' traffic at rate_gbs; the
// busiest link direction carries that times its hops per member.
double torus_factor(const Topology& t, const std::vector<std::int64_t>& nodes, int devices_per_node, double device_gbs,
                    double rate_gbs, Traffic traffic) {
  const std::size_t p = nodes.size();
  std::vector<std::array<double, 2>> hops(t.torus_dims.size(), {0.0, 0.0});
  if (traffic == Traffic::Ring) {
    for (std::size_t i = 0; i < p; ++i) add_route(t.torus_dims, nodes[i], nodes[(i + 1) % p], 1.0, hops);
  } else {
    std::map<std::int64_t, double> members;
    for (const auto n : nodes) members[n] += 1;
    for (const auto& [a, ca] : members)
      for (const auto& [b, cb] : members)
        if (a != b) add_route(t.torus_dims, a, b, ca * cb / double(p - 1), hops);
  }
  double busiest = 0;
  for (const auto& h : hops) busiest = std::max({busiest, h[0], h[1]});
  const double link = t.torus_link_gbs > 0 ? t.torus_link_gbs : devices_per_node * device_gbs;
  return std::max(1.0, devices_per_node * rate_gbs * busiest / double(p) / link);
}

}  // namespace

std::string describe(const Topology& t) {
  if (t.kind == "torus") return fmt::format("torus {}", fmt::join(t.torus_dims, " x "));
  if (t.kind == "flat") return "one switch";
  if (t.nodes_per_switch <= 0 || t.oversubscription <= 1) return "fat tree, full bisection";
  return fmt::format("fat tree, {:g}:1 above leaves of {} nodes", t.oversubscription, t.nodes_per_switch);
}

double congestion(const Topology& t, int nodes, int devices_per_node, double device_gbs, double rate_gbs,
                  Traffic traffic, int size, int stride) {
  if (size <= 1 || t.kind == "flat") return 1;
  const bool tree = t.kind == "fat_tree";
  if (tree && (t.oversubscription <= 1 || t.nodes_per_switch <= 0 || t.nodes_per_switch >= nodes)) return 1;
  // The search asks for the same few groups many times; the torus's
  // all-to-all is quadratic in the group's nodes.
  static std::mutex lock;
  static std::map<std::string, double> seen;
  std::string key = fmt::format("{} {} {} {} {} {} {} {} {} {} {}", t.kind, t.nodes_per_switch, t.oversubscription,
                                t.torus_link_gbs, nodes, devices_per_node, device_gbs, rate_gbs, int(traffic), size, stride);
  for (const int d : t.torus_dims) key += fmt::format(" {}", d);
  {
    const std::lock_guard<std::mutex> g(lock);
    const auto it = seen.find(key);
    if (it != seen.end()) return it->second;
  }
  const auto members = member_nodes(size, stride, devices_per_node);
  const double f =
      tree ? std::max(1.0, t.oversubscription * leaf_share(members, t.nodes_per_switch, traffic) * rate_gbs / device_gbs)
           : torus_factor(t, members, devices_per_node, device_gbs, rate_gbs, traffic);
  const std::lock_guard<std::mutex> g(lock);
  seen.emplace(std::move(key), f);
  return f;
}

}  // namespace exa::plan
