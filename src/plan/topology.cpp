#include "plan/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/error.hpp"

namespace exa::plan {

namespace {

// Calls f(members) for every group of `size` ranks at stride `stride` in a
// world of `world` ranks, as the rank order makes them: ranks r0 + i *
// stride for each r0 whose (r0 / stride) % size is 0. Groups that would run
// past the world are left out.
template <class F>
void for_each_group(std::int64_t world, int size, int stride, F f) {
  std::vector<std::int64_t> members(static_cast<std::size_t>(size));
  const std::int64_t period = std::int64_t(size) * stride;
  for (std::int64_t base = 0; base + period <= world; base += period)
    for (std::int64_t r0 = base; r0 < base + stride; ++r0) {
      for (int i = 0; i < size; ++i) members[std::size_t(i)] = r0 + std::int64_t(i) * stride;
      f(members);
    }
}

// The busiest leaf's share of its devices' traffic that leaves it.
double leaf_share(const Topology& t, std::int64_t world, int devices_per_node, Traffic traffic, int size,
                  int stride) {
  const std::int64_t per_leaf = std::int64_t(t.nodes_per_switch) * devices_per_node;
  const std::int64_t leaves = (world + per_leaf - 1) / per_leaf;
  std::vector<double> out(static_cast<std::size_t>(leaves), 0.0);
  std::map<std::int64_t, double> members_in;
  for_each_group(world, size, stride, [&](const std::vector<std::int64_t>& m) {
    const std::size_t p = m.size();
    if (traffic != Traffic::AllToAll) {
      // A chain's gradients come back up the receiving leaf's own uplink.
      const std::size_t edges = traffic == Traffic::Ring ? p : p - 1;
      for (std::size_t i = 0; i < edges; ++i) {
        const std::int64_t from = m[i] / per_leaf, to = m[(i + 1) % p] / per_leaf;
        if (from == to) continue;
        out[std::size_t(from)] += 1;
        if (traffic == Traffic::Chain) out[std::size_t(to)] += 1;
      }
      return;
    }
    // All-to-all: a member in a leaf of c members sends (p - c) / (p - 1)
    // of its bytes out of it.
    members_in.clear();
    for (const auto r : m) members_in[r / per_leaf] += 1;
    for (const auto& [leaf, c] : members_in) out[std::size_t(leaf)] += c * (double(p) - c) / double(p - 1);
  });
  // A leaf's uplink is its switch's, however many of its devices the world uses.
  return *std::max_element(out.begin(), out.end()) / double(per_leaf);
}

// Link loads of a torus: [node][dimension][direction], in flows (a
// device sending at the collective's rate is 1).
struct TorusLoads {
  const std::vector<int>& dims;
  std::vector<double> load;
  TorusLoads(const std::vector<int>& d, std::int64_t nodes) : dims(d), load(std::size_t(nodes) * d.size() * 2, 0.0) {}

  std::int64_t node_of(const std::vector<std::int64_t>& c) const {
    std::int64_t n = 0;
    for (std::size_t k = dims.size(); k-- > 0;) n = n * dims[k] + c[k];
    return n;
  }
  void walk(std::vector<std::int64_t> c, std::size_t k, int dir, std::int64_t hops, double w) {
    const std::int64_t d = dims[k];
    for (std::int64_t h = 0; h < hops; ++h) {
      load[(std::size_t(node_of(c)) * dims.size() + k) * 2 + std::size_t(dir)] += w;
      c[k] = (c[k] + (dir == 0 ? 1 : d - 1)) % d;
    }
  }
  // Minimal dimension-ordered route from node a to node b: along the
  // first dimension, then the next; half way round goes half each way,
  // except on a dimension of 2, whose two neighbours are one node and one
  // link.
  void route(std::int64_t a, std::int64_t b, double w) {
    std::vector<std::int64_t> ca(dims.size()), cb(dims.size());
    for (std::size_t k = 0; k < dims.size(); ++k) {
      ca[k] = a % dims[k];
      cb[k] = b % dims[k];
      a /= dims[k];
      b /= dims[k];
    }
    for (std::size_t k = 0; k < dims.size(); ++k) {
      const std::int64_t d = dims[k];
      const std::int64_t delta = ((cb[k] - ca[k]) % d + d) % d;
      if (delta == 0) continue;
      if (2 * delta < d || d == 2) {
        walk(ca, k, 0, delta, w);
      } else if (2 * delta > d) {
        walk(ca, k, 1, d - delta, w);
      } else {
        walk(ca, k, 0, delta, w / 2);
        walk(ca, k, 1, delta, w / 2);
      }
      ca[k] = cb[k];
    }
  }
};

// The busiest link direction's flows.
double torus_busiest(const Topology& t, std::int64_t world, int devices_per_node, Traffic traffic, int size,
                     int stride) {
  std::int64_t nodes = 1;
  for (const int d : t.torus_dims) nodes *= d;
  EXA_REQUIRE(world <= nodes * devices_per_node,
              "a torus of {} nodes ({}) holds {} ranks of {} a node, not {}: describe a torus of at least {} nodes "
              "(torus_dims and nodes), or plan fewer ranks",
              nodes, fmt::join(t.torus_dims, " x "), nodes * devices_per_node, devices_per_node, world,
              (world + devices_per_node - 1) / devices_per_node);
  TorusLoads loads(t.torus_dims, nodes);
  std::map<std::int64_t, double> members_on;
  for_each_group(world, size, stride, [&](const std::vector<std::int64_t>& m) {
    const std::size_t p = m.size();
    if (traffic != Traffic::AllToAll) {
      const std::size_t edges = traffic == Traffic::Ring ? p : p - 1;
      for (std::size_t i = 0; i < edges; ++i) {
        const auto a = m[i] / devices_per_node, b = m[(i + 1) % p] / devices_per_node;
        if (a != b) loads.route(a, b, 1.0);
      }
      return;
    }
    members_on.clear();
    for (const auto r : m) members_on[r / devices_per_node] += 1;
    for (const auto& [a, ca] : members_on)
      for (const auto& [b, cb] : members_on)
        if (a != b) loads.route(a, b, ca * cb / double(p - 1));
  });
  return *std::max_element(loads.load.begin(), loads.load.end());
}

}  // namespace

std::string describe(const Topology& t) {
  if (t.kind == "torus") return fmt::format("torus {}", fmt::join(t.torus_dims, " x "));
  if (t.kind == "flat") return "one switch";
  if (t.nodes_per_switch <= 0 || t.oversubscription <= 1) return "fat tree, full bisection";
  return fmt::format("fat tree, {:g}:1 above leaves of {} nodes", t.oversubscription, t.nodes_per_switch);
}

double congestion(const Topology& t, std::int64_t world, int devices_per_node, double device_gbs, double rate_gbs,
                  Traffic traffic, int size, int stride) {
  EXA_REQUIRE(t.kind == "flat" || t.kind == "fat_tree" || t.kind == "torus",
              "topology \"{}\" is not flat, fat_tree or torus", t.kind);
  if (size <= 1 || t.kind == "flat") return 1;
  const bool tree = t.kind == "fat_tree";
  const std::int64_t nodes = (world + devices_per_node - 1) / devices_per_node;
  if (tree && (t.oversubscription <= 1 || t.nodes_per_switch <= 0 || t.nodes_per_switch >= nodes)) return 1;
  // The search asks for the same few groups millions of times: a key of
  // plain numbers (no allocation), the torus's dimensions in a fixed array
  // (a torus of more dimensions is computed every time).
  using Key = std::tuple<bool, int, double, double, std::array<int, 6>, std::int64_t, int, double, double, int, int,
                         int>;
  std::array<int, 6> dims{};
  const bool cacheable = t.torus_dims.size() <= dims.size();
  for (std::size_t k = 0; k < t.torus_dims.size() && cacheable; ++k) dims[k] = t.torus_dims[k];
  const Key key{tree, t.nodes_per_switch, t.oversubscription, t.torus_link_gbs, dims, world, devices_per_node,
                device_gbs, rate_gbs, int(traffic), size, stride};
  static std::mutex lock;
  static std::map<Key, double> seen;
  if (cacheable) {
    const std::lock_guard<std::mutex> g(lock);
    const auto it = seen.find(key);
    if (it != seen.end()) return it->second;
  }
  double f = 1;
  if (tree) {
    // The leaf's uplink has its devices' bandwidth over the oversubscription.
    f = t.oversubscription * leaf_share(t, world, devices_per_node, traffic, size, stride) * rate_gbs / device_gbs;
  } else {
    const double link = t.torus_link_gbs > 0 ? t.torus_link_gbs : devices_per_node * device_gbs;
    f = torus_busiest(t, world, devices_per_node, traffic, size, stride) * rate_gbs / link;
  }
  f = std::max(1.0, f);
  if (cacheable) {
    const std::lock_guard<std::mutex> g(lock);
    seen.emplace(key, f);
  }
  return f;
}

}  // namespace exa::plan
