#pragma once
// exa::comm::Watchdog: when a rank dies mid-run, the others stop within a
// bounded time with one message naming it, instead of blocking forever in
// MPI (MPICH does not notice a dead peer; only the launcher might).
//
//   comm::Watchdog::start(world, run_dir + "/.heartbeat", cfg.get_float("resilience.timeout_s"));  // collective
//   ... after each step:  comm::Watchdog::set_progress(step);
//   comm::Watchdog::stop();
//
// Liveness, two ways:
//  * Heartbeats. A background thread rewrites `<dir>/rank-<r>` every interval
//    (host, pid, wall time, a beat counter, the step, whether the main
//    thread is in an MPI wait). It dies with the process, so a killed rank's
//    file stops changing while a hung but living rank keeps beating. The
//    same thread watches ONE peer, the next rank in a ring, and flags it
//    dead when its file stops changing for `stale_after_s`: every rank
//    reads one file per interval (O(N) file-system work in all, not the
//    O(N^2) of all-watch-all, and no node leader to lose), and whatever set
//    of ranks dies, some survivor is the predecessor of a dead one.
//  * Bounded waits. Every wait of the MPI backend goes through
//    bounded_wait(): with a timeout it polls MPI_Test, and gives up when
//    the wait outlasts resilience.timeout_s or the ring found a dead peer.
//
// Giving up: the first rank to create `<dir>/abort` reads every rank's
// heartbeat, prints the one message (and leaves it in that file), and calls
// MPI_Abort(MPI_COMM_WORLD, kAbortExitCode). Other ranks that give up at
// the same moment stay quiet for a grace period, during which the reporter's
// abort normally ends them, so 10k ranks do not print 10k messages.
//
// Not started, or started with timeout 0, the watchdog does nothing and waits
// are plain MPI_Wait (unit tests, tools; also what to use under a debugger:
// a rank stopped at a breakpoint stops beating).
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

namespace exa::comm {

// MPI_Abort's error code: EX_TEMPFAIL ("try again later"), which a batch
// script can take as "requeue and resume from the last checkpoint".
inline constexpr int kAbortExitCode = 75;

struct WatchdogOptions {
  double interval_s = 0;     // heartbeat period; 0: default_heartbeat_interval(world size)
  double stale_after_s = 0;  // a peer silent this long is dead; 0: default_stale_after(interval)
};

class Watchdog {
 public:
  // Collective over `world` (the communicator MPI_Abort ends). Creates `dir`
  // (it must be on a file system every node shares; when it cannot be
  // created, waits are still bounded but nothing names the dead rank).
  // timeout_s <= 0: does nothing. A second start() without stop() throws.
  static void start(MPI_Comm world, const std::string& dir, double timeout_s, WatchdogOptions opt = {});
  // Joins the heartbeat thread and removes this rank's file. Not collective;
  // safe to call when not started. Also run at exit if the caller forgot.
  static void stop();
  static bool running();
  // The training step, shown in heartbeats and in the failure message. Cheap
  // (one relaxed atomic store); does nothing when not running.
  static void set_progress(std::int64_t step);

  // Tests only: called with the message instead of printing and aborting;
  // the wait then goes on without a deadline. Empty function: abort again.
  static void set_failure_hook_for_testing(std::function<void(const std::string&)> hook);
};

// Scope of a running watchdog: start() on construction, stop() on
// destruction (also when a constructor after it throws). A member declared
// before the objects whose destructors wait on collectives keeps those
// waits bounded.
class WatchdogScope {
 public:
  WatchdogScope(MPI_Comm world, const std::string& dir, double timeout_s) { Watchdog::start(world, dir, timeout_s); }
  ~WatchdogScope() { Watchdog::stop(); }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
};

// A wait that polls (tests its operation in a loop) and is bounded by the
// watchdog like bounded_wait: call poll() after each test that found the
// operation unfinished. poll() yields the core, and does not return when the
// wait has outlasted resilience.timeout_s or a peer was found dead (the job
// is aborted). Without a running watchdog it only yields.
class BoundedWait {
 public:
  BoundedWait(const char* what, int comm_size);
  ~BoundedWait();
  BoundedWait(const BoundedWait&) = delete;
  BoundedWait& operator=(const BoundedWait&) = delete;
  void poll();

 private:
  const char* what_;
  int size_;
  bool active_;
  bool deadline_ = true, peer_reported_ = false;
  double t0_ = 0;
};

// MPI_Wait(req, MPI_STATUS_IGNORE), bounded by the watchdog when it runs
// with a timeout. `what` and `comm_size` name the wait in the message
// ("MPI_Iallreduce over 4 ranks"). Returns MPI_Wait's error code.
int bounded_wait(MPI_Request* req, const char* what, int comm_size);

}  // namespace exa::comm
