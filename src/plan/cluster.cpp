#include "plan/cluster.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"

namespace exa::plan {

double Cluster::peak_tflops(const std::string& precision) const {
  if (precision == "bf16") return bf16_tflops;
  if (precision == "fp16") return fp16_tflops;
  return fp32_tflops;
}

namespace {

struct Reader {
  const toml::table& t;
  const std::string& path;

  double num(const char* section, const char* key, double lo, double hi, bool required, double fallback) const {
    const auto node = t[section][key];
    if (!node) {
      EXA_REQUIRE(!required, "{}: [{}] {} is missing; give it (docs/planner.md lists the keys)", path, section, key);
      return fallback;
    }
    const auto v = node.value<double>();
    EXA_REQUIRE(v.has_value(), "{}: [{}] {} must be a number", path, section, key);
    EXA_REQUIRE(*v >= lo && *v <= hi, "{}: [{}] {} = {} is outside [{}, {}]", path, section, key, *v, lo, hi);
    return *v;
  }
  std::string str(const char* section, const char* key, const std::string& fallback) const {
    const auto node = t[section][key];
    if (!node) return fallback;
    const auto v = node.value<std::string>();
    EXA_REQUIRE(v.has_value(), "{}: [{}] {} must be a string", path, section, key);
    return *v;
  }
};

Topology read_topology(const toml::table& t, const Reader& r, int nodes) {
  const std::string& path = r.path;
  Topology topo;
  topo.kind = r.str("cluster", "topology", "fat_tree");
  EXA_REQUIRE(topo.kind == "flat" || topo.kind == "fat_tree" || topo.kind == "torus",
              "{}: [cluster] topology = \"{}\"; use flat, fat_tree or torus", path, topo.kind);
  // A key of another wiring would be ignored: refuse it instead.
  auto only_for = [&](const char* key, const char* kind) {
    EXA_REQUIRE(!t["cluster"][key] || topo.kind == kind,
                "{}: [cluster] {} describes a {} but topology = \"{}\"; remove it, or set topology = \"{}\"", path,
                key, kind, topo.kind, kind);
  };
  only_for("nodes_per_switch", "fat_tree");
  only_for("oversubscription", "fat_tree");
  only_for("torus_dims", "torus");
  only_for("torus_link_gbs", "torus");
  if (topo.kind == "fat_tree") {
    const double per_switch = r.num("cluster", "nodes_per_switch", 0, nodes, false, 0);
    EXA_REQUIRE(per_switch == double(std::int64_t(per_switch)),
                "{}: [cluster] nodes_per_switch = {} is not a whole number of nodes", path, per_switch);
    topo.nodes_per_switch = int(per_switch);
    topo.oversubscription = r.num("cluster", "oversubscription", 1, 1e3, false, 1);
  }
  if (topo.kind == "torus") {
    const auto* dims = t["cluster"]["torus_dims"].as_array();
    EXA_REQUIRE(dims != nullptr && !dims->empty(),
                "{}: topology = \"torus\" needs [cluster] torus_dims, the nodes along each dimension (for example "
                "[8, 8, 4] for 256 nodes)",
                path);
    std::int64_t product = 1;
    for (const auto& d : *dims) {
      const auto v = d.value<std::int64_t>();
      EXA_REQUIRE(v.has_value() && *v >= 1, "{}: [cluster] torus_dims must hold whole numbers of nodes, 1 or more",
                  path);
      topo.torus_dims.push_back(int(*v));
      product *= *v;
    }
    EXA_REQUIRE(product == nodes, "{}: [cluster] torus_dims multiply to {} nodes, but nodes = {}; make them agree",
                path, product, nodes);
    topo.torus_link_gbs = r.num("cluster", "torus_link_gbs", 0, 1e6, false, 0);
  }
  return topo;
}

}  // namespace

Cluster load_cluster(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}:{}: {}; fix the cluster file (input/clusters/ has examples)", path,
                            e.source().begin.line, e.description()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("cannot read the cluster file {}: {}", path, e.what()));
  }
  // A misspelt key would otherwise leave its default in place unnoticed.
  const std::vector<std::string> link_keys{"bandwidth_gbs", "latency_us",          "allreduce_gbs",
                                          "alltoall_gbs",  "allreduce_large_gbs", "overlap"};
  const std::map<std::string, std::vector<std::string>> known{
      {"cluster",
       {"name", "topology", "nodes", "devices_per_node", "nodes_per_switch", "oversubscription", "torus_dims",
        "torus_link_gbs"}},
      {"device",
       {"fp32_tflops", "bf16_tflops", "fp16_tflops", "matmul_efficiency", "low_precision_efficiency",
        "attention_efficiency", "gemm_half_rows", "memory_gib", "memory_bandwidth_gbs", "elementwise_passes"}},
      {"intra_node", link_keys},
      {"inter_node", link_keys},
      {"storage", {"write_gbs"}}};
  for (const auto& [k, v] : t) {
    const std::string s(k.str());
    const auto keys = known.find(s);
    EXA_REQUIRE(keys != known.end(),
                "{}: unknown section [{}]; the sections are cluster, device, intra_node, inter_node, storage", path, s);
    EXA_REQUIRE(v.is_table(), "{}: [{}] must be a table", path, s);
    for (const auto& [key, value] : *v.as_table()) {
      const std::string name(key.str());
      EXA_REQUIRE(std::find(keys->second.begin(), keys->second.end(), name) != keys->second.end(),
                  "{}: unknown key [{}] {}; the keys of [{}] are {}", path, s, name, s,
                  fmt::format("{}", fmt::join(keys->second, ", ")));
    }
  }
  const Reader r{t, path};
  Cluster c;
  c.source = path;
  c.name = r.str("cluster", "name", path);
  c.nodes = int(r.num("cluster", "nodes", 1, 1e6, true, 1));
  c.topology = read_topology(t, r, c.nodes);
  c.devices_per_node = int(r.num("cluster", "devices_per_node", 1, 4096, true, 1));
  c.fp32_tflops = r.num("device", "fp32_tflops", 1e-4, 1e5, true, 0);
  c.bf16_tflops = r.num("device", "bf16_tflops", 0, 1e5, false, 0);
  c.fp16_tflops = r.num("device", "fp16_tflops", 0, 1e5, false, c.bf16_tflops);
  c.matmul_efficiency = r.num("device", "matmul_efficiency", 0.01, 1, false, 0.7);
  c.low_precision_efficiency = r.num("device", "low_precision_efficiency", 0.01, 1, false, c.matmul_efficiency);
  c.attention_efficiency = r.num("device", "attention_efficiency", 0.001, 1, false, 0.4);
  c.gemm_half_rows = r.num("device", "gemm_half_rows", 0, 1e6, false, 0);
  c.memory_gib = r.num("device", "memory_gib", 0.01, 1e6, true, 0);
  c.memory_bandwidth_gbs = r.num("device", "memory_bandwidth_gbs", 0.1, 1e6, true, 0);
  c.elementwise_passes = r.num("device", "elementwise_passes", 0, 1000, false, 8);
  auto link = [&](const char* section, bool required, const Link& fallback) {
    Link l;
    l.bandwidth_gbs = r.num(section, "bandwidth_gbs", 0.001, 1e6, required, fallback.bandwidth_gbs);
    l.latency_us = r.num(section, "latency_us", 0, 1e6, false, fallback.latency_us);
    l.allreduce_gbs = r.num(section, "allreduce_gbs", 0, 1e6, false, 0);
    l.alltoall_gbs = r.num(section, "alltoall_gbs", 0, 1e6, false, 0);
    l.allreduce_large_gbs = r.num(section, "allreduce_large_gbs", 0, 1e6, false, 0);
    l.overlap = r.num(section, "overlap", 0, 1, false, fallback.overlap);
    return l;
  };
  Link intra_default;
  intra_default.latency_us = 1;
  c.intra = link("intra_node", true, intra_default);
  Link inter_default = c.intra;
  inter_default.latency_us = 5;
  c.inter = link("inter_node", c.nodes > 1, inter_default);
  c.storage_write_gbs = r.num("storage", "write_gbs", 1e-4, 1e6, false, 1);
  return c;
}

namespace {

// The keys of the cluster's own wiring, one per line.
std::string topology_keys(const Topology& t) {
  if (t.kind == "fat_tree")
    return fmt::format("nodes_per_switch = {}\noversubscription = {:.6g}\n", t.nodes_per_switch, t.oversubscription);
  if (t.kind == "torus")
    return fmt::format("torus_dims = [{}]\ntorus_link_gbs = {:.6g}\n", fmt::join(t.torus_dims, ", "),
                       t.torus_link_gbs);
  return "";
}

std::string link_toml(const Link& l) {
  return fmt::format(
      "bandwidth_gbs = {:.6g}\nlatency_us = {:.4g}\nallreduce_gbs = {:.6g}\nalltoall_gbs = {:.6g}\n"
      "allreduce_large_gbs = {:.6g}\noverlap = {:.3g}\n",
      l.bandwidth_gbs, l.latency_us, l.allreduce_gbs, l.alltoall_gbs, l.allreduce_large_gbs, l.overlap);
}

}  // namespace

double Link::allreduce(double bytes) const {
  const double small = allreduce();
  if (allreduce_large_gbs <= 0) return small;
  const double lo = 16.0 * 1048576, hi = 256.0 * 1048576;
  const double t = std::clamp(std::log(bytes / lo) / std::log(hi / lo), 0.0, 1.0);
  return small * std::pow(allreduce_large_gbs / small, t);
}

double Link::exposed(double comm, double compute) const {
  return comm - std::min(overlap * comm, std::max(0.0, compute));
}

std::string to_toml(const Cluster& c) {
  return fmt::format(
      "[cluster]\nname = \"{}\"\ntopology = \"{}\"\nnodes = {}\ndevices_per_node = {}\n{}\n"
      "[device]\nfp32_tflops = {:.6g}\nbf16_tflops = {:.6g}\nfp16_tflops = {:.6g}\nmatmul_efficiency = {:.4g}\n"
      "low_precision_efficiency = {:.4g}\n"
      "attention_efficiency = {:.4g}\ngemm_half_rows = {:.4g}\nmemory_gib = {:.6g}\nmemory_bandwidth_gbs = {:.6g}\nelementwise_passes = {:.4g}\n\n"
      "[intra_node]\n{}\n"
      "[inter_node]\n{}\n"
      "[storage]\nwrite_gbs = {:.6g}\n",
      c.name, c.topology.kind, c.nodes, c.devices_per_node, topology_keys(c.topology), c.fp32_tflops, c.bf16_tflops, c.fp16_tflops,
      c.matmul_efficiency, c.low_precision_efficiency, c.attention_efficiency, c.gemm_half_rows, c.memory_gib, c.memory_bandwidth_gbs, c.elementwise_passes,
      link_toml(c.intra), link_toml(c.inter), c.storage_write_gbs);
}

}  // namespace exa::plan
