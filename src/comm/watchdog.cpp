#include "comm/watchdog.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "comm/heartbeat.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::comm {

namespace fs = std::filesystem;

namespace {

// How long a rank that gave up after another one claimed the report stays
// quiet before it aborts on its own: the reporter reads N small files and
// calls MPI_Abort, which normally ends every rank well within this.
constexpr double kReporterGrace_s = 15.0;

double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct WatchdogState {
  std::mutex mu;  // start/stop, the hook and the dead-peer record
  std::condition_variable cv;
  bool stopping = false;
  std::thread thread;
  std::atomic<bool> running{false};

  MPI_Comm world = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::string dir;  // empty: heartbeats unavailable
  double timeout_s = 0, interval_s = 1, stale_after_s = 10;
  Heartbeat self;  // identity fields; the thread fills in the rest

  std::atomic<std::int64_t> step{-1};
  std::atomic<double> wait_since{0};
  std::atomic<std::int64_t> beat{0};

  // Set by the heartbeat thread when its ring peer went silent.
  std::atomic<bool> peer_dead{false};
  std::atomic<bool> reporting{false};  // a thread of this rank runs fail()
  KnownDead dead;
  std::optional<Heartbeat> dead_last;
  double dead_flagged_at = 0;

  std::function<void(const std::string&)> hook;

  ~WatchdogState();
};

WatchdogState& state() {
  static WatchdogState s;
  return s;
}

std::string file_of(const WatchdogState& s, int rank) { return fmt::format("{}/rank-{}", s.dir, rank); }

Heartbeat current(const WatchdogState& s) {
  Heartbeat hb = s.self;
  hb.time = wall_now();
  hb.beat = s.beat.load(std::memory_order_relaxed);
  hb.step = s.step.load(std::memory_order_relaxed);
  hb.wait_since = s.wait_since.load(std::memory_order_relaxed);
  return hb;
}

// Write to a temporary and rename, so a reader sees the old record or the
// new one, never half of one.
bool write_heartbeat(const WatchdogState& s, const Heartbeat& hb, std::string& err) {
  const std::string path = file_of(s, s.rank), tmp = fmt::format("{}/.rank-{}.tmp", s.dir, s.rank);
  const std::string text = to_text(hb);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return err = std::strerror(errno), false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!ok) err = std::strerror(errno);
  ::close(fd);
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) return err = std::strerror(errno), false;
  return ok;
}

enum class Found { record, missing, other };

// Reads rank `r`'s record; `other` covers unreadable, torn and earlier jobs' files.
Found read_heartbeat(const WatchdogState& s, int r, Heartbeat& out) {
  const int fd = ::open(file_of(s, r).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Found::missing : Found::other;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return Found::other;
  auto hb = parse_heartbeat(std::string_view(buf, static_cast<std::size_t>(n)));
  if (!hb || hb->job != s.self.job || hb->rank != r) return Found::other;
  out = *hb;
  return Found::record;
}

// true: this rank reports. The first to create `<dir>/abort` wins; when the
// file system cannot arbitrate, every rank speaks for itself.
bool claim_report(const WatchdogState& s, int& fd) {
  fd = -1;
  if (s.dir.empty()) return true;
  fd = ::open((s.dir + "/abort").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  return fd >= 0 || errno != EEXIST;
}

[[noreturn]] void park() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Everything this rank knows, as the failure message. `scan`: read every
// rank's heartbeat (the reporter does, once), else only this rank and the
// dead peer it watched.
std::string describe(WatchdogState& s, const std::string& wait, double waited, bool scan) {
  std::vector<std::optional<Heartbeat>> by_rank(static_cast<std::size_t>(s.size));
  by_rank[static_cast<std::size_t>(s.rank)] = current(s);
  std::vector<KnownDead> known;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.peer_dead) {
      known.push_back(KnownDead{s.dead.rank, mono_now() - s.dead_flagged_at + s.dead.silent_s});
      by_rank[static_cast<std::size_t>(s.dead.rank)] = s.dead_last;
    }
  }
  if (scan && !s.dir.empty()) {
    for (int r = 0; r < s.size; ++r) {
      Heartbeat hb;
      if (r != s.rank && read_heartbeat(s, r, hb) == Found::record) by_rank[static_cast<std::size_t>(r)] = hb;
    }
  }
  FailureReport rep;
  rep.self_rank = s.rank;
  rep.timed_out_wait = wait;
  rep.waited_s = waited;
  rep.timeout_s = s.timeout_s;
  rep.heartbeat_dir = s.dir;
  rep.scanned = scan;
  // Something already went wrong: a file a few beats old is evidence
  // enough for the report (the abort decision took the full staleness
  // limit, or the timeout, which may be shorter).
  rep.diag = diagnose(by_rank, wall_now(), std::min(s.stale_after_s, 3 * s.interval_s + 1), s.rank, known);
  return failure_message(rep);
}

// Gives up: one message, then MPI_Abort. Returns only with a test hook.
void fail(WatchdogState& s, const std::string& wait, double waited) {
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    hook = s.hook;
  }
  if (hook) {
    hook(describe(s, wait, waited, true));
    return;
  }
  if (s.reporting.exchange(true)) park();  // the other thread of this rank is on it
  int fd = -1;
  const bool reporter = claim_report(s, fd);
  if (!reporter) {
    const double until = mono_now() + kReporterGrace_s;
    while (mono_now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string msg = describe(s, wait, waited, reporter);
  if (!reporter) msg += fmt::format(" (another rank claimed the report in {}/abort but has not ended the job)", s.dir);
  log::error("{}", msg);
  if (fd >= 0) {
    const std::string line = msg + "\n";
    [[maybe_unused]] const auto n = ::write(fd, line.data(), line.size());
    ::close(fd);
  }
  // MPI_Abort makes the launcher kill every process at once, and hydra was
  // seen to drop the last stderr lines still in its forwarding pipes: give
  // the message a moment to reach the user (the job is lost either way).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  int finalized = 0;
  MPI_Finalized(&finalized);
  // From the heartbeat thread this breaks MPI_THREAD_FUNNELED's letter, but
  // that thread only gets here when the main thread is stuck outside any
  // bounded wait, and MPICH's abort (a message to the process manager) works
  // from any thread; hanging forever is the alternative.
  if (!finalized) MPI_Abort(s.world, kAbortExitCode);
  std::_Exit(kAbortExitCode);
}

void beat_loop(WatchdogState& s) {
  PeerWatch watch;
  const int peer = s.size > 1 ? (s.rank + 1) % s.size : -1;
  bool warned = false;
  std::unique_lock<std::mutex> lk(s.mu);
  while (!s.stopping) {
    lk.unlock();
    s.beat.fetch_add(1, std::memory_order_relaxed);
    std::string err;
    if (!write_heartbeat(s, current(s), err) && !warned) {
      warned = true;
      log::warn(
          "watchdog: cannot write heartbeat {} ({}); the other ranks will take this rank for dead after {:g} s. "
          "Make {} writable on a file system every node shares, or set resilience.timeout_s = 0",
          file_of(s, s.rank), err, s.stale_after_s, s.dir);
    }
    const double now = mono_now();
    if (peer >= 0 && !s.peer_dead.load()) {
      Heartbeat hb;
      switch (read_heartbeat(s, peer, hb)) {
        case Found::record: watch.seen(hb, now); break;
        case Found::missing: watch.gone(); break;
        case Found::other: break;
      }
      if (watch.dead(now, s.stale_after_s)) {
        lk.lock();
        s.dead = KnownDead{peer, watch.silent_for(now)};
        s.dead_last = watch.last();
        s.dead_flagged_at = now;
        lk.unlock();
        s.peer_dead.store(true);
      }
    }
    // The main thread acts on a dead peer at its next wait. One that is
    // stuck elsewhere (compute, an MPI call outside bounded_wait) gets one
    // more staleness period before this thread acts for it.
    if (s.peer_dead.load() && !s.reporting.load() && now - s.dead_flagged_at > s.stale_after_s) {
      int finalized = 0;
      MPI_Finalized(&finalized);  // callable from any thread; after it the job is over anyway
      if (!finalized) fail(s, "", 0);
      s.reporting.store(true);  // (with a test hook) report once
    }
    lk.lock();
    s.cv.wait_for(lk, std::chrono::duration<double>(s.interval_s), [&] { return s.stopping; });
  }
}

void stop_state(WatchdogState& s) {
  if (!s.running.load()) return;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.stopping = true;
  }
  s.cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
  s.running.store(false);
  if (!s.dir.empty()) {
    std::error_code ec;
    fs::remove(file_of(s, s.rank), ec);
    fs::remove(fmt::format("{}/.rank-{}.tmp", s.dir, s.rank), ec);
  }
}

// A caller that forgot stop() must not leave a joinable thread to
// std::terminate at exit.
WatchdogState::~WatchdogState() { stop_state(*this); }

}  // namespace

void Watchdog::start(MPI_Comm world, const std::string& dir, double timeout_s, WatchdogOptions opt) {
  WatchdogState& s = state();
  if (timeout_s <= 0) return;
  EXA_REQUIRE(!s.running.load(), "Watchdog::start: the watchdog already runs; call Watchdog::stop() first");
  MPI_Comm_rank(world, &s.rank);
  MPI_Comm_size(world, &s.size);
  s.world = world;
  s.timeout_s = timeout_s;
  s.interval_s = opt.interval_s > 0 ? opt.interval_s : default_heartbeat_interval(s.size);
  s.stale_after_s = opt.stale_after_s > 0 ? opt.stale_after_s : default_stale_after(s.interval_s);

  std::error_code ec, ignored;
  if (!dir.empty()) fs::create_directories(dir, ec);
  const bool dir_ok = !dir.empty() && fs::is_directory(dir, ignored);
  if (s.rank == 0 && dir_ok) fs::remove(fs::path(dir) / "abort", ignored);  // an earlier job's report
  // Rank 0's pid and clock name the job, so that an earlier run's files in
  // a reused run directory are never taken for this one's. The broadcast
  // also orders rank 0's removal of the old report before anyone's failure.
  std::int64_t id[2] = {static_cast<std::int64_t>(::getpid()),
                        std::chrono::system_clock::now().time_since_epoch().count()};
  MPI_Bcast(id, 2, MPI_INT64_T, 0, world);

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  s.self = Heartbeat{};
  s.self.job = fmt::format("{}-{}", id[0], id[1]);
  s.self.rank = s.rank;
  s.self.host = host;
  s.self.pid = static_cast<std::int64_t>(::getpid());
  s.step.store(-1);
  s.wait_since.store(0);
  s.beat.store(0);
  s.peer_dead.store(false);
  s.reporting.store(false);
  s.dead_last.reset();
  s.dir = dir_ok ? dir : std::string();
  if (!dir_ok) {
    log::warn(
        "watchdog: cannot create the heartbeat directory '{}' ({}); waits stay bounded by "
        "resilience.timeout_s = {:g} s, but a dead rank will not be named. Set output.run_dir to a writable "
        "directory on a file system every node shares",
        dir,
        ec            ? ec.message()
        : dir.empty() ? "no directory given"
                      : "not a directory",
        timeout_s);
  }
  s.stopping = false;
  s.running.store(true);
  s.thread = std::thread(beat_loop, std::ref(s));
}

void Watchdog::stop() { stop_state(state()); }

bool Watchdog::running() { return state().running.load(); }

void Watchdog::set_progress(std::int64_t step) { state().step.store(step, std::memory_order_relaxed); }

void Watchdog::set_failure_hook_for_testing(std::function<void(const std::string&)> hook) {
  WatchdogState& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.hook = std::move(hook);
}

BoundedWait::BoundedWait(const char* what, int comm_size)
    : what_(what), size_(comm_size), active_(state().running.load(std::memory_order_acquire)) {
  if (!active_) return;
  t0_ = mono_now();
  state().wait_since.store(wall_now(), std::memory_order_relaxed);
}

BoundedWait::~BoundedWait() {
  if (active_) state().wait_since.store(0, std::memory_order_relaxed);
}

void BoundedWait::poll() {
  const double now = mono_now();
  if (!active_) {
    // No watchdog: spin like MPI_Wait, yielding the core to other ranks.
    std::this_thread::yield();
    return;
  }
  WatchdogState& s = state();
  if (!peer_reported_ && s.peer_dead.load(std::memory_order_acquire)) {
    peer_reported_ = true;
    fail(s, "", 0);
  }
  if (deadline_ && now - t0_ > s.timeout_s) {
    deadline_ = false;
    fail(s, fmt::format("{} over {} rank{}", what_, size_, size_ == 1 ? "" : "s"), now - t0_);
  }
  // MPICH moves a collective only inside MPI calls, so a wait keeps testing:
  // it yields the core (other ranks may share it) and naps only once the
  // wait is long enough to be a straggler or a failure rather than traffic.
  if (now - t0_ > 1.0) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  } else {
    std::this_thread::yield();
  }
}

int bounded_wait(MPI_Request* req, const char* what, int comm_size) {
  if (!state().running.load(std::memory_order_acquire)) return MPI_Wait(req, MPI_STATUS_IGNORE);
  BoundedWait w(what, comm_size);
  for (;;) {
    int flag = 0;
    const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) return rc;
    w.poll();
  }
}

}  // namespace exa::comm
