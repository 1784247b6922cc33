#pragma once
// The pure half of the watchdog (comm/watchdog.hpp): the heartbeat record a
// rank writes, how a watcher decides a peer is dead, and the one message the
// job dies with. No MPI, no threads, no clocks read here: callers pass the
// times in, so tests can drive every decision.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exa::comm {

// What `<dir>/rank-<r>` holds.
struct Heartbeat {
  std::string job;  // id shared by the ranks of one job: files left by an earlier run are ignored
  int rank = -1;    // world rank
  std::string host;
  std::int64_t pid = 0;
  double time = 0;         // wall clock (s since the epoch) of this write
  std::int64_t beat = 0;   // counts writes: changes every interval while the process lives
  std::int64_t step = -1;  // last progress reported (the training step); -1 before any
  double wait_since = 0;   // wall clock at which the current MPI wait began; 0 when not waiting
};

std::string to_text(const Heartbeat& hb);
// nullopt for anything that is not a complete record (a write caught half
// way on a file system without atomic rename, a foreign file).
std::optional<Heartbeat> parse_heartbeat(std::string_view text);

// One peer's heartbeat file as this rank sees it over time. Staleness is
// measured on the watcher's own monotonic clock, from when it last saw the
// beat counter change, so the clocks of two nodes are never compared and a
// watcher that was itself descheduled does not mistake that for silence.
class PeerWatch {
 public:
  // The file was read and parsed at time `now` (monotonic seconds).
  void seen(const Heartbeat& hb, double now);
  // The file is absent. Once seen, that means the peer stopped its watchdog
  // cleanly (a killed process cannot remove its file), so it is not dead.
  void gone();
  // Seen, still present, and unchanged for longer than `stale_after_s`.
  bool dead(double now, double stale_after_s) const;
  // Seconds since the beat counter last changed (0 before the first sighting).
  double silent_for(double now) const;
  const std::optional<Heartbeat>& last() const { return last_; }

 private:
  std::optional<Heartbeat> last_;
  double changed_at_ = 0;
  bool gone_ = false;
};

// A rank as the failure report describes it.
struct PeerState {
  Heartbeat hb;
  double age_s = 0;  // seconds since its last heartbeat
};

// Every rank's heartbeat, sorted into what the report names.
struct Diagnosis {
  std::vector<PeerState> dead;   // heartbeat older than the staleness limit
  std::vector<PeerState> stuck;  // beating but not progressing: behind the newest step, or not in an MPI wait
  std::vector<int> missing;      // no readable file of this job
  int alive = 0;                 // fresh heartbeats, the reporter included
  std::int64_t newest_step = -1;
};

// `by_rank[r]` is rank r's record (nullopt: none). `now` is the reporter's
// wall clock: at failure time ages across nodes are compared through the wall
// clock (NTP keeps nodes within milliseconds; a skewed clock can only blur
// the report, never trigger an abort, which PeerWatch decides locally).
// `known_dead`: ranks a PeerWatch found dead, with how long they were silent;
// they are reported dead whatever their wall-clock age says.
struct KnownDead {
  int rank = -1;
  double silent_s = 0;
};
Diagnosis diagnose(const std::vector<std::optional<Heartbeat>>& by_rank, double now, double stale_after_s,
                   int self_rank, const std::vector<KnownDead>& known_dead = {});

struct FailureReport {
  int self_rank = 0;
  // Why this rank gave up: the wait that outlasted the limit, e.g.
  // "MPI_Iallreduce over 4 ranks"; empty when the heartbeat watcher found a
  // dead peer before any wait timed out.
  std::string timed_out_wait;
  double waited_s = 0;
  double timeout_s = 0;
  std::string heartbeat_dir;  // empty: heartbeats unavailable
  bool scanned = true;        // false: `diag` holds only the reporter and the peer it watched
  Diagnosis diag;
};

// The one line the job dies with, naming the dead or stuck ranks.
std::string failure_message(const FailureReport& r);

// Defaults: a heartbeat every max(1 s, world/2000 s), so that 10k ranks
// rewrite at most ~2000 files per second on a shared metadata server; a peer
// is dead after max(10 s, 10 intervals) without a change, which rides out a
// few missed beats of a loaded node or a file-system hiccup.
double default_heartbeat_interval(int world_size);
double default_stale_after(double interval_s);

}  // namespace exa::comm
