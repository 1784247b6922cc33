#include "train/federated.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "comm/fixed_point.hpp"
#include "comm/mpi_env.hpp"
#include "comm/secure_aggregation.hpp"
#include "comm/secure_sum.hpp"
#include "core/deck/deck_checks.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/deck_dataset.hpp"
#include "train/trainer.hpp"

namespace exa::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }


}  // namespace

FederatedOptions FederatedOptions::from_deck(const deck::Config& c) {
  FederatedOptions o;
  o.sites = int(c.get_int("federated.sites"));
  o.local_steps = c.get_int("federated.local_steps");
  o.rounds = c.get_int("train.steps") / o.local_steps;
  o.secure = c.get_bool("federated.secure");
  const auto t = c.get_int("federated.threshold");
  o.threshold = t == 0 ? o.sites / 2 + 1 : int(t);
  o.balance = c.get_string("federated.balance") == "steps";
  if (const auto& d = c.get_string("federated.site_data"); d != "none") o.data = deck::comma_items(d);
  o.slowdown.assign(static_cast<std::size_t>(o.sites), 1.0);
  if (const auto& f = c.get_string("federated.slowdown"); f != "none") o.slowdown = deck::number_list(f);
  if (const auto& d = c.get_string("federated.drop"); d != "none") {
    long long s = -1, r = -1;
    std::sscanf(d.c_str(), "%lld:%lld", &s, &r);  // the deck checked the form
    o.drop_site = int(s);
    o.drop_round = r;
  }
  return o;
}

std::vector<std::int64_t> balanced_steps(const std::vector<double>& step_seconds, std::int64_t local_steps) {
  const double fastest = *std::min_element(step_seconds.begin(), step_seconds.end());
  std::vector<std::int64_t> steps;
  for (const double t : step_seconds)
    steps.push_back(std::clamp<std::int64_t>(std::llround(double(local_steps) * fastest / t), 1, local_steps));
  return steps;
}

deck::Config federated_site_config(const deck::Config& cfg, int site) {
  const std::string tag = fmt::format("site{}", site);
  auto overrides = cfg.overrides();
  overrides.push_back("data.path=" + deck::comma_items(cfg.get_string("federated.site_data")).at(std::size_t(site)));
  overrides.push_back("output.run_dir=" + (fs::path(cfg.get_string("output.run_dir")) / tag).string());
  for (const char* key : {"checkpoint.dir", "checkpoint.local_dir"})
    if (const fs::path p = cfg.get_string(key); p.is_absolute()) overrides.push_back(std::string(key) + "=" + (p / tag).string());
  return deck::Config::from_text(cfg.deck_text(), cfg.deck_path(), overrides, cfg.world_size());
}

namespace {

// A site's file must hold data before any rank starts a Trainer on it.
void check_site_data(const FederatedOptions& o) {
  for (int k = 0; k < o.sites; ++k) {
    const auto p = resolve_data_path(o.data[std::size_t(k)]);
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    EXA_REQUIRE(!ec, "federated site {} has no data: federated.site_data entry {} is '{}', which cannot be read ({}); "
                "give the site an existing file",
                k, k + 1, p, ec.message());
    EXA_REQUIRE(size > 0, "federated site {} has no data: federated.site_data entry {} ('{}') is empty; give the site "
                "a file with its corpus",
                k, k + 1, p);
  }
}

// What every rank of every site does after each of its steps, through the
// Trainer's step hook: the pretend slowness, and at a round's end the
// averaging, the evaluation, the round's record and the next round's steps.
class Rounds {
 public:
  Rounds(const FederatedOptions& o, Trainer& t, MPI_Comm world, MPI_Comm site_comm, MPI_Comm cross, int site)
      : o_(o), t_(t), world_(world), site_comm_(site_comm), cross_(cross), site_(site),
        quota_(std::size_t(o.sites), o.local_steps) {
    const std::int64_t first = t.step();
    std::vector<std::int64_t> firsts(static_cast<std::size_t>(o.sites));
    MPI_Allgather(&first, 1, MPI_INT64_T, firsts.data(), 1, MPI_INT64_T, cross_);
    EXA_REQUIRE(std::all_of(firsts.begin(), firsts.end(), [&](std::int64_t s) { return s == first; }),
                "federated: the sites start from different steps ({}); each resumed its own latest checkpoint, and "
                "they must be of the same round: remove the newer checkpoints or start afresh",
                fmt::join(firsts, ", "));
    round_ = first / o.local_steps + 1;
    done_ = first % o.local_steps;
    last_ = round_start_ = Clock::now();
  }

  bool after_step() {
    const double m = o_.slowdown[std::size_t(site_)];
    if (m > 1.0) std::this_thread::sleep_for((Clock::now() - last_) * (m - 1.0));
    busy_ += seconds(Clock::now() - last_);
    if (++done_ < quota_[std::size_t(site_)]) {
      last_ = Clock::now();
      return true;
    }
    average();
    done_ = 0;
    busy_ = 0;
    ++round_;
    last_ = round_start_ = Clock::now();
    // A scheduler's stop signal is agreed over every site at a round's end,
    // after the average: every site then stops at the same round, with the
    // averaged model in its checkpoint, and a resume starts the next round
    // together. (Per step, sites that balance their steps would ask at
    // different times.)
    if (round_ <= o_.rounds && t_.agree_stop(world_)) return false;
    return round_ <= o_.rounds;
  }

  double global_val() const { return global_val_; }

 private:
  void average() {
    const int n_sites = o_.sites;
    const double total = double(std::accumulate(quota_.begin(), quota_.end(), std::int64_t(0)));
    const double share = double(quota_[std::size_t(site_)]) / total;
    const auto dev = t_.trainable_values();
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dev);
    std::vector<std::uint32_t> x(host.extent(0));
    std::int64_t clamped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = comm::encode_fixed(share * double(host(i)), n_sites, &clamped);
    comm::SecureSumOptions so;
    so.secure = o_.secure;
    so.threshold = o_.threshold;
    so.round = std::uint64_t(round_);
    so.drop = site_ == o_.drop_site && round_ == o_.drop_round;
    const auto res = comm::secure_sum(cross_, x, so);
    double kept_share = 0;
    int kept = 0;
    for (int k = 0; k < n_sites; ++k)
      if (res.kept[std::size_t(k)]) kept_share += double(quota_[std::size_t(k)]) / total, ++kept;
    for (std::size_t i = 0; i < x.size(); ++i) host(i) = float(comm::decode_fixed(x[i]) / kept_share);
    Kokkos::deep_copy(dev, host);
    t_.masters_replaced();
    // The round's wall time ends when the sum is back: the slowest site set it.
    double busy = busy_, wall = seconds(Clock::now() - round_start_);
    MPI_Allreduce(MPI_IN_PLACE, &busy, 1, MPI_DOUBLE, MPI_MAX, site_comm_);
    MPI_Allreduce(MPI_IN_PLACE, &wall, 1, MPI_DOUBLE, MPI_MAX, site_comm_);
    std::int64_t clamped_all = clamped;
    MPI_Allreduce(MPI_IN_PLACE, &clamped_all, 1, MPI_INT64_T, MPI_SUM, site_comm_);
    const double val = t_.evaluate();
    std::vector<double> busys(static_cast<std::size_t>(n_sites)), walls(static_cast<std::size_t>(n_sites)), vals(static_cast<std::size_t>(n_sites));
    MPI_Allgather(&busy, 1, MPI_DOUBLE, busys.data(), 1, MPI_DOUBLE, cross_);
    MPI_Allgather(&wall, 1, MPI_DOUBLE, walls.data(), 1, MPI_DOUBLE, cross_);
    MPI_Allgather(&val, 1, MPI_DOUBLE, vals.data(), 1, MPI_DOUBLE, cross_);
    global_val_ = std::accumulate(vals.begin(), vals.end(), 0.0) / n_sites;
    std::vector<double> eff(static_cast<std::size_t>(n_sites));
    for (int k = 0; k < n_sites; ++k) eff[std::size_t(k)] = busys[std::size_t(k)] / walls[std::size_t(k)];
    const double mean = std::accumulate(eff.begin(), eff.end(), 0.0) / n_sites;
    double var = 0;
    for (double e : eff) var += (e - mean) * (e - mean);
    const double cv = std::sqrt(var / n_sites) / mean;
    const int cross_rank = comm_rank(cross_);
    const auto plain = comm::secagg::round_bytes(x.size(), n_sites, cross_rank == 0).plain;
    const std::int64_t bytes = res.bytes_sent + res.bytes_received;
    log::info("federated round {}/{} (step {}): val global {:.4f}, sites [{:.4f}]; {} of {} sites kept; steps [{}]; "
              "efficiency [{:.2f}] (cv {:.1f}%); {} aggregation, {} bytes sent and received by {} ({:.4f}x "
              "plain){}",
              round_, o_.rounds, t_.step(), global_val_, fmt::join(vals, ", "), kept, n_sites, fmt::join(quota_, ", "),
              fmt::join(eff, ", "), 100 * cv, o_.secure ? "secure" : "plain", bytes,
              cross_rank == 0 ? "the aggregator" : "a party",
              double(bytes) / double(plain), clamped_all ? fmt::format(", {} values clamped", clamped_all) : "");
    nlohmann::json rec{{"event", "federated_round"},
                       {"round", round_},
                       {"step", t_.step()},
                       {"site", site_},
                       {"val_site", val},
                       {"val_global", global_val_},
                       {"val_sites", vals},
                       {"kept", std::vector<int>(res.kept.begin(), res.kept.end())},
                       {"steps", quota_},
                       {"busy_s", busys},
                       {"wall_s", walls},
                       {"efficiency", eff},
                       {"efficiency_cv", cv},
                       {"secure", o_.secure},
                       {"bytes", bytes},
                       {"plain_bytes", plain},
                       {"clamped", clamped_all}};
    t_.metrics().write(rec);
    if (o_.balance) {
      // Next round: each site's steps scaled by the fastest site's step time
      // over its own, so that all finish together. The step times are
      // averaged over the rounds (exponentially, half each), as one round's
      // are noisy: its first steps warm up, a busy node slows a few.
      if (per_step_.empty()) per_step_.assign(static_cast<std::size_t>(n_sites), 0.0);
      for (int k = 0; k < n_sites; ++k) {
        const double t = busys[std::size_t(k)] / double(quota_[std::size_t(k)]);
        per_step_[std::size_t(k)] = per_step_[std::size_t(k)] == 0 ? t : 0.5 * (per_step_[std::size_t(k)] + t);
      }
      quota_ = balanced_steps(per_step_, o_.local_steps);
    }
  }

  const FederatedOptions& o_;
  Trainer& t_;
  MPI_Comm world_, site_comm_, cross_;
  int site_;
  std::vector<std::int64_t> quota_;  // steps of each site in this round
  std::vector<double> per_step_;     // federated.balance: each site's step time, averaged over the rounds
  std::int64_t round_ = 1, done_ = 0;  // the round (1-based) and this site's steps in it
  double busy_ = 0;                     // this rank's step time in the round
  Clock::time_point last_, round_start_;
  double global_val_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace

FederatedResult run_federated(const deck::Config& cfg, MPI_Comm world) {
  const FederatedOptions o = FederatedOptions::from_deck(cfg);
  check_site_data(o);
  if (o.secure) comm::secagg::require_available();  // before any training, not at the first round
  const int rank = comm_rank(world), size = comm_size(world);
  const int per_site = size / o.sites, site = rank / per_site, local = rank % per_site;
  MPI_Comm site_comm = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  MPI_Comm_split(world, site, rank, &site_comm);
  MPI_Comm_split(world, local, site, &cross);
  log::info("federated: {} sites of {} ranks, {} rounds of {} steps, {} averaging{}; site data {}", o.sites, per_site,
            o.rounds, o.local_steps, o.secure ? fmt::format("secure (threshold {})", o.threshold) : "plain",
            o.balance ? ", steps balanced by speed" : "", fmt::join(o.data, ", "));
  FederatedResult res;
  {
    const deck::Config scfg = federated_site_config(cfg, site);
    Trainer t(scfg, site_comm);
    Rounds rounds(o, t, world, site_comm, cross, site);
    t.set_step_hook([&](std::int64_t) { return rounds.after_step(); });
    t.run();
    res.val = rounds.global_val();
    res.signal = t.stopped_by();
    res.step = t.step();
  }
  MPI_Comm_free(&cross);
  MPI_Comm_free(&site_comm);
  return res;
}

}  // namespace exa::train
