#include "bench/bench_profile.hpp"

#include <time.h>

#include <Kokkos_Core.hpp>
#include <cstring>
#include <vector>

#include "core/profiling.hpp"

namespace exa::bench {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

namespace {

namespace KT = Kokkos::Tools::Experimental;

struct Stamp {
  double wall = 0, cpu = 0;
  static Stamp now() { return Stamp{wall_seconds(), process_cpu_seconds()}; }
};

struct Open {
  std::string name;
  Stamp start;
};

struct State {
  bool active = false;
  KT::EventSet saved{};
  std::vector<Open> regions;  // the region stack
  int gemm_depth = 0;         // nesting of "exa::gemm" regions
  Stamp gemm_start;
  Stamp kernel_start;
  std::string kernel_name;
  bool kernel_open = false;
  Stamp copy_start;
  bool copy_open = false;
  KernelTable kernels;
  RegionTable region_totals;
};

State& st() {
  static State s;
  return s;
}

// Regions of the kernels library (gemm.hpp) mark calls, not phases.
bool is_phase(const std::string& name) {
  return name.rfind("exa::gemm", 0) != 0 && name.rfind("exa::grouped_linear", 0) != 0;
}

const std::string& current_phase() {
  static const std::string none = "-";
  const auto& r = st().regions;
  for (auto it = r.rbegin(); it != r.rend(); ++it)
    if (is_phase(it->name)) return it->name;
  return none;
}

void add(KernelStat& k, const Stamp& from, const Stamp& to) {
  k.wall += to.wall - from.wall;
  k.cpu += to.cpu - from.cpu;
  k.calls += 1;
}

void charge(const std::string& kernel, const Stamp& from) {
  add(st().kernels[{current_phase(), kernel}], from, Stamp::now());
}

void on_push(const char* name) {
  auto& s = st();
  const Stamp now = Stamp::now();
  if (std::strcmp(name, "exa::gemm") == 0 && s.gemm_depth++ == 0) s.gemm_start = now;
  s.regions.push_back(Open{name, now});
}

void on_pop() {
  auto& s = st();
  if (s.regions.empty()) return;
  const Open top = s.regions.back();
  const bool gemm = top.name == "exa::gemm";
  if (gemm && --s.gemm_depth == 0) {
    s.regions.pop_back();
    charge("gemm", s.gemm_start);  // to the phase around the gemm
  } else {
    s.regions.pop_back();
  }
  add(s.region_totals[top.name], top.start, Stamp::now());
}

void on_begin_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  auto& s = st();
  *id = 0;
  if (s.gemm_depth > 0 || s.copy_open) return;  // inside a gemm or a deep_copy: charged to that
  s.kernel_name = name;
  s.kernel_open = true;
  s.kernel_start = Stamp::now();
}

void on_end_kernel(std::uint64_t) {
  auto& s = st();
  if (!s.kernel_open) return;
  s.kernel_open = false;
  charge(s.kernel_name, s.kernel_start);
}

void on_begin_copy(Kokkos_Profiling_SpaceHandle, const char*, const void*, Kokkos_Profiling_SpaceHandle,
                   const char*, const void*, std::uint64_t) {
  auto& s = st();
  if (s.gemm_depth > 0 || s.kernel_open) return;
  s.copy_open = true;
  s.copy_start = Stamp::now();
}

void on_end_copy() {
  auto& s = st();
  if (!s.copy_open) return;
  s.copy_open = false;
  charge("deep_copy", s.copy_start);
}

}  // namespace

bool KernelProfiler::start() {
  auto& s = st();
  if (s.active) return true;
  if (Kokkos::Tools::profileLibraryLoaded()) return false;
  s.saved = KT::get_callbacks();
  s.regions.clear();
  s.gemm_depth = 0;
  s.kernel_open = false;
  s.copy_open = false;
  KT::set_push_region_callback(on_push);
  KT::set_pop_region_callback(on_pop);
  KT::set_begin_parallel_for_callback(on_begin_kernel);
  KT::set_end_parallel_for_callback(on_end_kernel);
  KT::set_begin_parallel_reduce_callback(on_begin_kernel);
  KT::set_end_parallel_reduce_callback(on_end_kernel);
  KT::set_begin_parallel_scan_callback(on_begin_kernel);
  KT::set_end_parallel_scan_callback(on_end_kernel);
  KT::set_begin_deep_copy_callback(on_begin_copy);
  KT::set_end_deep_copy_callback(on_end_copy);
  s.active = true;
  return true;
}

void KernelProfiler::stop() {
  auto& s = st();
  if (!s.active) return;
  KT::set_callbacks(s.saved);
  s.active = false;
}

bool KernelProfiler::active() { return st().active; }

void KernelProfiler::reset() {
  st().kernels.clear();
  st().region_totals.clear();
}

KernelTable KernelProfiler::kernels() { return st().kernels; }

RegionTable KernelProfiler::regions() { return st().region_totals; }

}  // namespace exa::bench
