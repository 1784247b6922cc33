#include "train/energy.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <algorithm>
#include <regex>

#include "comm/mpi_env.hpp"

namespace exa::train {

namespace fs = std::filesystem;

namespace {

std::optional<std::uint64_t> read_u64(const std::string& file) {
  std::ifstream in(file);
  unsigned long long v = 0;
  if (!(in >> v)) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

// The ranks of `world` on this rank's machine: they read the same counters.
int count_ranks_on_host(MPI_Comm world) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  const int n = comm_size(host);
  MPI_Comm_free(&host);
  return n;
}

}  // namespace

EnergyOptions EnergyOptions::from_deck(const deck::Config& cfg) {
  EnergyOptions o;
  o.power_w_per_rank = cfg.get_float("output.power_w_per_rank");
  o.pue = cfg.get_float("output.pue");
  return o;
}

RaplCounters::RaplCounters(const std::string& root) {
  static const std::regex package("intel-rapl:[0-9]+");
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, package)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    Domain d;
    d.file = (fs::path(root) / name / "energy_uj").string();
    const auto now = read_u64(d.file);
    if (!now) continue;  // root-only, or not a RAPL zone after all
    d.last_uj = *now;
    d.range_uj = read_u64((fs::path(root) / name / "max_energy_range_uj").string()).value_or(0);
    domains_.push_back(d);
  }
}

double RaplCounters::joules() {
  double uj = 0;
  for (auto& d : domains_) {
    const auto now = read_u64(d.file);
    if (!now) continue;
    if (*now >= d.last_uj) {
      uj += static_cast<double>(*now - d.last_uj);
    } else if (d.range_uj > d.last_uj) {
      uj += static_cast<double>(d.range_uj - d.last_uj) + static_cast<double>(*now);  // wrapped once
    }
    d.last_uj = *now;
  }
  return uj * 1e-6;
}

EnergyMeter::EnergyMeter(const EnergyOptions& o, MPI_Comm world)
    : EnergyMeter(o, count_ranks_on_host(world), comm_size(world)) {}

EnergyMeter::EnergyMeter(const EnergyOptions& o, int ranks_on_host, int world)
    : power_w_(o.power_w_per_rank),
      pue_(o.pue),
      ranks_on_host_(std::max(1, ranks_on_host)),
      world_(std::max(1, world)),
      // A given power needs no counters (and reads no sysfs files).
      rapl_(o.power_w_per_rank > 0 ? std::string() : o.powercap_root) {}

std::string EnergyMeter::source() const {
  const auto n = [](int k, const char* what) { return fmt::format("{} {}{}", k, what, k == 1 ? "" : "s"); };
  if (power_w_ > 0) {
    return fmt::format("{} W per rank (output.power_w_per_rank) x {}, PUE {}", power_w_, n(world_, "rank"), pue_);
  }
  return fmt::format("RAPL: {} on rank 0's host ({}), scaled to {}, PUE {}",
                     n(static_cast<int>(rapl_.domains()), "package"), n(ranks_on_host_, "rank"), n(world_, "rank"),
                     pue_);
}

void EnergyMeter::restart() {
  if (rapl_.readable()) rapl_.joules();
}

void EnergyMeter::report(StepLog& s, double seconds, double tokens) {
  if (!enabled()) return;
  const double run_j = power_w_ > 0 ? power_w_ * seconds * world_ : rapl_.joules() / ranks_on_host_ * world_;
  total_j_ += run_j * pue_;
  s.joules_per_token = tokens > 0 ? run_j * pue_ / tokens : 0.0;
  s.kwh = total_j_ / 3.6e6;
}

std::string EnergyMeter::summary(double tokens, double planned_tokens) const {
  if (!enabled()) return {};
  const double per_token = tokens > 0 ? total_j_ / tokens : 0.0;
  return fmt::format("energy: {:.4g} kWh for {:.0f} tokens ({:.4g} J/token; {}); a whole run of {:.0f} tokens: "
                     "{:.4g} kWh",
                     total_j_ / 3.6e6, tokens, per_token, source(), planned_tokens,
                     per_token * planned_tokens / 3.6e6);
}

}  // namespace exa::train
