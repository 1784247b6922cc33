#include "comm/heartbeat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace exa::comm {

namespace {

constexpr std::string_view kMagic = "examoe-heartbeat 1";
constexpr std::size_t kListed = 8;  // ranks named one by one before "and N more"

bool parse_int(std::string_view s, std::int64_t& out) {
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

bool parse_double(std::string_view s, double& out) {
  // strtod rather than from_chars<double>, which older libstdc++ lacks.
  const std::string tmp(s);
  char* end = nullptr;
  out = std::strtod(tmp.c_str(), &end);
  return !tmp.empty() && end == tmp.c_str() + tmp.size();
}

std::string at_step(std::int64_t step) {
  return step < 0 ? std::string("before the first step") : fmt::format("at step {}", step);
}

std::string who(const Heartbeat& hb) { return fmt::format("host {}, pid {}", hb.host, hb.pid); }

template <class F>
std::string listing(const std::vector<PeerState>& v, F&& describe) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < kListed; ++i) {
    if (i) s += ", ";
    s += fmt::format("rank {} ({})", v[i].hb.rank, describe(v[i]));
  }
  if (v.size() > kListed) s += fmt::format(" and {} more", v.size() - kListed);
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < kListed; ++i) s += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  if (ranks.size() > kListed) s += fmt::format(" and {} more", ranks.size() - kListed);
  return s;
}

}  // namespace

std::string to_text(const Heartbeat& hb) {
  return fmt::format("{}\njob={}\nrank={}\nhost={}\npid={}\ntime={:.6f}\nbeat={}\nstep={}\nwait_since={:.6f}\n", kMagic,
                     hb.job, hb.rank, hb.host, hb.pid, hb.time, hb.beat, hb.step, hb.wait_since);
}

std::optional<Heartbeat> parse_heartbeat(std::string_view text) {
  if (text.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  Heartbeat hb;
  unsigned found = 0;
  std::size_t pos = kMagic.size();
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return std::nullopt;  // every record line ends in '\n': a torn write
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = line.substr(0, eq), val = line.substr(eq + 1);
    std::int64_t i = 0;
    bool ok = true;
    if (key == "job") {
      hb.job = std::string(val), found |= 1u;
    } else if (key == "rank") {
      ok = parse_int(val, i) && i >= 0, hb.rank = static_cast<int>(i), found |= 2u;
    } else if (key == "host") {
      hb.host = std::string(val), found |= 4u;
    } else if (key == "pid") {
      ok = parse_int(val, hb.pid), found |= 8u;
    } else if (key == "time") {
      ok = parse_double(val, hb.time), found |= 16u;
    } else if (key == "beat") {
      ok = parse_int(val, hb.beat), found |= 32u;
    } else if (key == "step") {
      ok = parse_int(val, hb.step), found |= 64u;
    } else if (key == "wait_since") {
      ok = parse_double(val, hb.wait_since), found |= 128u;
    }  // unknown keys: a newer writer; ignored
    if (!ok) return std::nullopt;
  }
  if (found != 255u) return std::nullopt;
  return hb;
}

void PeerWatch::seen(const Heartbeat& hb, double now) {
  if (!last_ || gone_ || last_->beat != hb.beat || last_->pid != hb.pid) changed_at_ = now;
  last_ = hb;
  gone_ = false;
}

void PeerWatch::gone() { gone_ = last_.has_value(); }

bool PeerWatch::dead(double now, double stale_after_s) const {
  return last_ && !gone_ && now - changed_at_ > stale_after_s;
}

double PeerWatch::silent_for(double now) const { return last_ ? now - changed_at_ : 0.0; }

Diagnosis diagnose(const std::vector<std::optional<Heartbeat>>& by_rank, double now, double stale_after_s,
                   int self_rank, const std::vector<KnownDead>& known_dead) {
  Diagnosis d;
  std::vector<PeerState> fresh;
  for (std::size_t r = 0; r < by_rank.size(); ++r) {
    const int rank = static_cast<int>(r);
    if (!by_rank[r]) {
      if (rank != self_rank) d.missing.push_back(rank);
      continue;
    }
    PeerState p{*by_rank[r], std::max(0.0, now - by_rank[r]->time)};
    bool known = false;
    for (const auto& k : known_dead) {
      if (k.rank == rank) known = true, p.age_s = std::max(p.age_s, k.silent_s);
    }
    if (rank != self_rank && (known || p.age_s > stale_after_s)) {
      d.dead.push_back(p);
      continue;
    }
    ++d.alive;
    d.newest_step = std::max(d.newest_step, p.hb.step);
    if (rank != self_rank) fresh.push_back(p);
  }
  // With a dead rank in view, a living one caught computing is no news.
  if (d.dead.empty()) {
    for (const auto& p : fresh)
      if (p.hb.step < d.newest_step || p.hb.wait_since == 0) d.stuck.push_back(p);
  }
  return d;
}

std::string failure_message(const FailureReport& r) {
  const Diagnosis& d = r.diag;
  std::vector<std::string> parts;
  if (d.dead.size() == 1) {
    const auto& p = d.dead.front();
    parts.push_back(fmt::format("rank {} ({}) stopped responding: last heartbeat {:.1f} s ago {}", p.hb.rank, who(p.hb),
                                p.age_s, at_step(p.hb.step)));
  } else if (!d.dead.empty()) {
    parts.push_back(fmt::format("{} ranks stopped responding: {}", d.dead.size(), listing(d.dead, [](const auto& p) {
                                  return fmt::format("{}, last heartbeat {:.1f} s ago {}", who(p.hb), p.age_s,
                                                     at_step(p.hb.step));
                                })));
  } else if (!d.stuck.empty()) {
    auto why = [&](const PeerState& p) {
      return p.hb.step < d.newest_step
                 ? fmt::format("{} while others reached step {}", at_step(p.hb.step), d.newest_step)
                 : fmt::format("{}, outside any MPI wait", at_step(p.hb.step));
    };
    if (d.stuck.size() == 1) {
      const auto& p = d.stuck.front();
      parts.push_back(fmt::format("rank {} ({}) is alive but not progressing: {}", p.hb.rank, who(p.hb), why(p)));
    } else {
      parts.push_back(
          fmt::format("{} ranks are alive but not progressing: {}", d.stuck.size(),
                      listing(d.stuck, [&](const auto& p) { return fmt::format("{}, {}", who(p.hb), why(p)); })));
    }
  }

  const int world = d.alive + static_cast<int>(d.dead.size() + d.missing.size());
  if (!r.scanned) {
    // Nothing more is known: other ranks' files were not read.
  } else if (r.heartbeat_dir.empty()) {
    parts.push_back("heartbeat files are unavailable, so which rank stopped is unknown");
  } else if (d.alive <= 1 && world > 1 && d.missing.size() + 1 == static_cast<std::size_t>(world)) {
    parts.push_back(
        fmt::format("no other rank's heartbeat is readable in {} (it must be on a file system every node "
                    "shares), so which rank stopped is unknown",
                    r.heartbeat_dir));
  } else {
    if (!d.missing.empty()) {
      parts.push_back(fmt::format("no heartbeat from rank{} {} (exited, or never started)",
                                  d.missing.size() > 1 ? "s" : "", rank_list(d.missing)));
    }
    if (d.dead.empty() && d.stuck.empty() && d.missing.empty()) {
      parts.push_back(
          fmt::format("all {} ranks still beat and wait in MPI {}: suspect collectives called in a different "
                      "order on different ranks, or the network",
                      d.alive, at_step(d.newest_step)));
    }
  }

  if (!r.timed_out_wait.empty()) {
    parts.push_back(
        fmt::format("{} waited {:.1f} s on rank {}, past resilience.timeout_s = {:g} (raise it if a "
                    "collective legitimately takes that long; 0 = no limit)",
                    r.timed_out_wait, r.waited_s, r.self_rank, r.timeout_s));
    parts.push_back(fmt::format("rank {} is aborting the job", r.self_rank));
  } else {
    parts.push_back(fmt::format("rank {} is aborting the job (resilience.timeout_s = {:g})", r.self_rank, r.timeout_s));
  }
  std::string msg;
  for (const auto& p : parts) msg += (msg.empty() ? "" : "; ") + p;
  return msg;
}

double default_heartbeat_interval(int world_size) { return std::max(1.0, world_size / 2000.0); }

double default_stale_after(double interval_s) { return std::max(10.0, 10.0 * interval_s); }

}  // namespace exa::comm
