#include "bench/bench_phases.hpp"

#include <algorithm>
#include <functional>
#include <tuple>

#include "bench/bench_step.hpp"
#include "bench/has_prefix.hpp"
#include "core/profiling.hpp"

namespace exa::bench {

Times region_times(bool have_profile) {
  Times times;
  if (have_profile) {
    for (const auto& [name, st] : KernelProfiler::regions()) times[name] = {st.cpu, st.wall};
  } else {
    for (const auto& [name, w] : phase_timers().all()) times[name] = {0.0, w};
  }
  return times;
}

std::vector<PhaseRow> phase_rows(const Times& t, const KernelTable& kt, bool have_kernels, double steps) {
  auto get = [&](const std::string& n) {
    const auto it = t.find(n);
    return it == t.end() ? std::make_pair(0.0, 0.0) : std::make_pair(it->second.first / steps, it->second.second / steps);
  };
  auto split = [&](PhaseRow& row, const std::string& phase) {
    row.leaf = have_kernels;
    if (!have_kernels) return;
    double gemm = 0, kern = 0, copy = 0;
    for (const auto& [key, st] : kt) {
      if (key.first != phase) continue;
      (key.second == "gemm" ? gemm : key.second == "deep_copy" ? copy : kern) += st.cpu;
    }
    row.gemm = gemm / steps;
    row.kernels = kern / steps;
    row.copy = copy / steps;
    row.host = std::max(0.0, row.cpu - row.gemm - row.kernels - row.copy);
  };
  // Model phases one '/'-level below `prefix` (which ends in '/').
  auto children = [&](const std::string& prefix) {
    const auto depth = std::count(prefix.begin(), prefix.end(), '/');
    std::vector<std::string> out;
    for (const auto& [name, v] : t)
      if (has_prefix(name, prefix) && std::count(name.begin(), name.end(), '/') == depth) out.push_back(name);
    return out;
  };
  std::vector<PhaseRow> rows;
  // A phase and its subtree; `region` is the timer, `kids` its sub-phases.
  std::function<void(const std::string&, const std::string&, int, const std::vector<std::string>&)> emit;
  emit = [&](const std::string& label, const std::string& region, int depth, const std::vector<std::string>& kids) {
    PhaseRow row;
    row.name = label;
    row.depth = depth;
    std::tie(row.cpu, row.wall) = get(region);
    if (kids.empty()) {
      split(row, region);
      rows.push_back(row);
      return;
    }
    rows.push_back(row);
    PhaseRow rest;
    rest.name = label + " (rest)";
    rest.depth = depth + 1;
    rest.cpu = row.cpu;
    rest.wall = row.wall;
    for (const auto& k : kids) {
      const auto sub = k == "exa::optim::adamw" ? std::vector<std::string>{} : children(k + "/");
      emit(k, k, depth + 1, sub);
      const auto [c, w] = get(k);
      rest.cpu -= c;
      rest.wall -= w;
    }
    rest.cpu = std::max(0.0, rest.cpu);
    rest.wall = std::max(0.0, rest.wall);
    split(rest, region);
    rows.push_back(rest);
  };
  emit("io (sample + upload)", kIo, 0, {});
  emit("forward", kForward, 0, children("forward/"));
  emit("backward", kBackward, 0, children("backward/"));
  emit("optimizer", kOptimizer, 0, {"exa::optim::adamw"});
  return rows;
}

}  // namespace exa::bench
