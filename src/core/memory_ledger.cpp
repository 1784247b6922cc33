#include "core/memory_ledger.hpp"

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

namespace exa {

namespace {

struct Counters {
  std::atomic<std::int64_t> current{0}, peak{0};
};

std::array<Counters, kMemCategories>& counters() {
  static std::array<Counters, kMemCategories> c;
  return c;
}

std::atomic<bool>& installed_flag() {
  static std::atomic<bool> f{false};
  return f;
}

std::atomic<std::int64_t> g_total{0}, g_cap{0};
std::mutex g_over_mutex;
MemoryLedger::OverCap g_over;

// Under g_over_mutex: a sum above the cap, kept when it is the largest yet,
// with each category's bytes at this moment.
void record_over(std::int64_t total) {
  if (total <= g_over.total) return;
  g_over.total = total;
  for (int k = 0; k < kMemCategories; ++k) g_over.bytes[std::size_t(k)] = counters()[std::size_t(k)].current.load();
}

void add(MemCategory cat, std::int64_t bytes) {
  auto& c = counters()[std::size_t(cat)];
  const std::int64_t now = c.current.fetch_add(bytes) + bytes;
  std::int64_t p = c.peak.load();
  while (now > p && !c.peak.compare_exchange_weak(p, now)) {
  }
  const std::int64_t total = g_total.fetch_add(bytes) + bytes, cap = g_cap.load();
  if (cap > 0 && bytes > 0 && total > cap) {
    std::lock_guard<std::mutex> lock(g_over_mutex);
    record_over(total);
  }
}

void add(const char* label, std::int64_t bytes) { add(MemoryLedger::category_of(label ? label : ""), bytes); }

void on_allocate(Kokkos::Profiling::SpaceHandle, const char* label, const void*, std::uint64_t size) {
  add(label, static_cast<std::int64_t>(size));
}

void on_deallocate(Kokkos::Profiling::SpaceHandle, const char* label, const void*, std::uint64_t size) {
  add(label, -static_cast<std::int64_t>(size));
}

std::mutex g_sampled_mutex;

}  // namespace

MemCategory MemoryLedger::category_of(const std::string& label) {
  static const std::pair<const char*, MemCategory> rules[] = {
      {"exa::params", MemCategory::Parameters},       {"exa::dp::params", MemCategory::Parameters},
      {"exa::dp::param_slot", MemCategory::Parameters}, {"exa::grads", MemCategory::Gradients},
      {"exa::dp::grads", MemCategory::Gradients},       {"exa::dp::grad_slot", MemCategory::Gradients},
      {"exa::dp::deferred_grad", MemCategory::Gradients},
      {"exa::optim::", MemCategory::Optimizer},         {"exa::model::", MemCategory::Activations},
      {"exa::dp::", MemCategory::Communication},        {"exa::dp_packed", MemCategory::Communication},
      {"exa::pipeline::", MemCategory::Communication},  {"exa::ep::", MemCategory::Communication},
      {"exa::tp", MemCategory::Communication},          {"exa::context::", MemCategory::Communication},
      {"exa::comm::", MemCategory::Communication},      {"exa::ckpt::", MemCategory::Checkpoint},
  };
  for (const auto& [prefix, cat] : rules)
    if (label.compare(0, std::strlen(prefix), prefix) == 0) return cat;
  return MemCategory::Workspace;
}

const char* MemoryLedger::name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::Optimizer: return "optimizer";
    case MemCategory::Activations: return "activations";
    case MemCategory::Communication: return "communication";
    case MemCategory::Checkpoint: return "checkpoint";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::Offload: return "offload";
  }
  return "?";
}

bool MemoryLedger::install() {
  if (installed_flag().load()) return true;
  if (Kokkos::Tools::profileLibraryLoaded()) return false;
  Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(on_deallocate);
  installed_flag() = true;
  return true;
}

bool MemoryLedger::installed() { return installed_flag().load(); }

std::array<MemBytes, kMemCategories> MemoryLedger::snapshot() {
  std::array<MemBytes, kMemCategories> out;
  for (int k = 0; k < kMemCategories; ++k)
    out[std::size_t(k)] = {counters()[std::size_t(k)].current.load(), counters()[std::size_t(k)].peak.load()};
  return out;
}

void MemoryLedger::record(const std::string& label, std::int64_t bytes) { add(label.c_str(), bytes); }

void MemoryLedger::set_sampled(MemCategory c, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_sampled_mutex);
  add(c, bytes - counters()[std::size_t(c)].current.load());
}

void MemoryLedger::restart_peaks() {
  for (auto& c : counters()) c.peak.store(c.current.load());
}

void MemoryLedger::set_cap(std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_over_mutex);
  g_cap.store(bytes);
  g_over = OverCap{};
  // Bytes allocated before the cap count too.
  if (bytes > 0 && g_total.load() > bytes) record_over(g_total.load());
}

std::int64_t MemoryLedger::cap() { return g_cap.load(); }

MemoryLedger::OverCap MemoryLedger::over_cap() {
  std::lock_guard<std::mutex> lock(g_over_mutex);
  return g_over;
}

}  // namespace exa
