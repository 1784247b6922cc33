// exa::comm::Watchdog: the pure decisions (heartbeat records, when a peer is
// dead, what the failure message says) and, in-process, the heartbeat file's
// life and a bounded wait that times out (through the test hook, which
// reports instead of aborting). Killing a rank for real is the end-to-end
// test train.dead_rank_exits_naming_it. Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/heartbeat.hpp"
#include "comm/mpi_env.hpp"
#include "comm/watchdog.hpp"

namespace {

using namespace exa::comm;
namespace fs = std::filesystem;

Heartbeat record(int rank, double time, std::int64_t step, double wait_since = 100.0) {
  Heartbeat hb;
  hb.job = "42-7";
  hb.rank = rank;
  hb.host = "n1" + std::to_string(rank);
  hb.pid = 4700 + rank;
  hb.time = time;
  hb.beat = 3;
  hb.step = step;
  hb.wait_since = wait_since;
  return hb;
}

// ---- pure logic -------------------------------------------------------------

TEST(Heartbeat, RoundTripsAndRejectsTornOrForeignText) {
  const Heartbeat hb = record(3, 1712345678.25, 7, 1712345670.5);
  const std::string text = to_text(hb);
  const auto back = parse_heartbeat(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->job, hb.job);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->host, "n13");
  EXPECT_EQ(back->pid, 4703);
  EXPECT_DOUBLE_EQ(back->time, hb.time);
  EXPECT_EQ(back->beat, 3);
  EXPECT_EQ(back->step, 7);
  EXPECT_DOUBLE_EQ(back->wait_since, hb.wait_since);

  EXPECT_FALSE(parse_heartbeat(text.substr(0, text.size() - 1)).has_value());  // last line cut
  EXPECT_FALSE(parse_heartbeat(text.substr(0, text.size() / 2)).has_value());
  EXPECT_FALSE(parse_heartbeat("").has_value());
  EXPECT_FALSE(parse_heartbeat("hello\nrank=1\n").has_value());
  std::string no_step = text;
  no_step.erase(no_step.find("step="), no_step.find('\n', no_step.find("step=")) - no_step.find("step=") + 1);
  EXPECT_FALSE(parse_heartbeat(no_step).has_value());
  std::string bad_pid = text;
  bad_pid.replace(bad_pid.find("pid=4703"), 8, "pid=47x3");
  EXPECT_FALSE(parse_heartbeat(bad_pid).has_value());
  EXPECT_TRUE(parse_heartbeat(text + "future_key=1\n").has_value());  // a newer writer's extra key
}

TEST(PeerWatch, DeadOnlyWhenSeenThenSilentPastTheLimit) {
  PeerWatch w;
  EXPECT_FALSE(w.dead(1000.0, 10.0));  // never seen: not started yet, or not visible here

  Heartbeat hb = record(1, 0, 2);
  w.seen(hb, 100.0);
  w.seen(hb, 105.0);  // same beat: no change
  EXPECT_FALSE(w.dead(110.0, 10.0));
  EXPECT_TRUE(w.dead(110.5, 10.0));
  EXPECT_DOUBLE_EQ(w.silent_for(110.5), 10.5);

  ++hb.beat;  // it beats again
  w.seen(hb, 111.0);
  EXPECT_FALSE(w.dead(120.0, 10.0));

  Heartbeat other = hb;  // same beat count from a restarted process
  other.pid += 1;
  w.seen(other, 125.0);
  EXPECT_FALSE(w.dead(134.0, 10.0));

  w.gone();  // removed: a clean stop, since a killed process cannot remove it
  EXPECT_FALSE(w.dead(1000.0, 10.0));
  w.seen(other, 1001.0);  // back again: watched afresh
  EXPECT_FALSE(w.dead(1010.0, 10.0));
  EXPECT_TRUE(w.dead(1011.5, 10.0));
}

TEST(Diagnose, SortsRanksIntoDeadStuckMissing) {
  const double now = 1000.0;
  // Rank 0 reports; 1 waits at step 7; 2 is silent 14.2 s; 3 has no file.
  std::vector<std::optional<Heartbeat>> all = {record(0, now, 7), record(1, now - 0.5, 7), record(2, now - 14.2, 7),
                                               std::nullopt};
  Diagnosis d = diagnose(all, now, 10.0, 0);
  ASSERT_EQ(d.dead.size(), 1u);
  EXPECT_EQ(d.dead[0].hb.rank, 2);
  EXPECT_NEAR(d.dead[0].age_s, 14.2, 1e-9);
  EXPECT_EQ(d.missing, std::vector<int>{3});
  EXPECT_EQ(d.alive, 2);
  EXPECT_TRUE(d.stuck.empty());

  // Nobody dead: a rank behind, and one outside any wait, are the suspects.
  all = {record(0, now, 7), record(1, now, 6), record(2, now, 7, 0.0), record(3, now, 7)};
  d = diagnose(all, now, 10.0, 0);
  EXPECT_TRUE(d.dead.empty());
  EXPECT_EQ(d.newest_step, 7);
  ASSERT_EQ(d.stuck.size(), 2u);
  EXPECT_EQ(d.stuck[0].hb.rank, 1);
  EXPECT_EQ(d.stuck[1].hb.rank, 2);

  // The reporter's own record never makes it dead or stuck.
  all = {record(0, now - 50, 3, 0.0), record(1, now, 7)};
  d = diagnose(all, now, 10.0, 0);
  EXPECT_TRUE(d.dead.empty());
  EXPECT_TRUE(d.stuck.empty());

  // A peer the ring watcher found dead is dead whatever the wall clocks say.
  all = {record(0, now, 7), record(1, now + 3, 7)};
  d = diagnose(all, now, 10.0, 0, {KnownDead{1, 12.5}});
  ASSERT_EQ(d.dead.size(), 1u);
  EXPECT_DOUBLE_EQ(d.dead[0].age_s, 12.5);
}

FailureReport report(std::vector<std::optional<Heartbeat>> all, double now, int self = 0) {
  FailureReport r;
  r.self_rank = self;
  r.timeout_s = 30;
  r.heartbeat_dir = "runs/x/.heartbeat";
  r.diag = diagnose(all, now, 10.0, self);
  return r;
}

TEST(FailureMessage, NamesTheDeadRank) {
  Heartbeat dead = record(3, 985.8, 7);
  dead.host = "n12";
  dead.pid = 4711;
  FailureReport r = report({record(0, 1000, 7), record(1, 1000, 7), record(2, 1000, 7), dead}, 1000.0);
  EXPECT_EQ(failure_message(r),
            "rank 3 (host n12, pid 4711) stopped responding: last heartbeat 14.2 s ago at step 7; "
            "rank 0 is aborting the job (resilience.timeout_s = 30)");

  r.timed_out_wait = "MPI_Iallreduce over 4 ranks";
  r.waited_s = 30.04;
  const std::string m = failure_message(r);
  EXPECT_NE(m.find("rank 3 (host n12, pid 4711) stopped responding"), std::string::npos) << m;
  EXPECT_NE(m.find("MPI_Iallreduce over 4 ranks waited 30.0 s on rank 0, past resilience.timeout_s = 30"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("rank 0 is aborting the job"), std::string::npos) << m;
}

TEST(FailureMessage, ListsSeveralDeadRanksAndCapsTheList) {
  std::vector<std::optional<Heartbeat>> all{record(0, 1000, 5)};
  for (int r = 1; r < 12; ++r) all.push_back(record(r, 980, r < 3 ? 4 : -1));
  const std::string m = failure_message(report(all, 1000.0));
  EXPECT_EQ(m.rfind("11 ranks stopped responding: rank 1 (host n11, pid 4701, last heartbeat 20.0 s ago at step 4), "
                    "rank 2 (",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("rank 3 (host n13, pid 4703, last heartbeat 20.0 s ago before the first step)"), std::string::npos)
      << m;
  EXPECT_NE(m.find(" and 3 more"), std::string::npos) << m;
  EXPECT_EQ(m.find("rank 9 ("), std::string::npos) << m;
}

TEST(FailureMessage, NamesRanksAliveButNotProgressing) {
  FailureReport r = report({record(0, 1000, 7), record(1, 1000, 7, 0.0), record(2, 1000, 7)}, 1000.0);
  r.timed_out_wait = "MPI_Ibarrier over 3 ranks";
  r.waited_s = 31;
  const std::string m = failure_message(r);
  EXPECT_EQ(m.rfind("rank 1 (host n11, pid 4701) is alive but not progressing: at step 7, outside any MPI wait; ", 0),
            0u)
      << m;

  r = report({record(0, 1000, 7), record(1, 1000, 5), record(2, 1000, 5)}, 1000.0);
  EXPECT_NE(failure_message(r).find("2 ranks are alive but not progressing: rank 1 (host n11, pid 4701, at step 5 "
                                    "while others reached step 7), rank 2 ("),
            std::string::npos)
      << failure_message(r);
}

TEST(FailureMessage, SaysWhatIsUnknown) {
  // Heartbeats unavailable: still which wait timed out, and after how long.
  FailureReport r = report({record(0, 1000, 2), std::nullopt}, 1000.0);
  r.heartbeat_dir.clear();
  r.timed_out_wait = "MPI_Iallgather over 2 ranks";
  r.waited_s = 30.2;
  EXPECT_EQ(failure_message(r),
            "heartbeat files are unavailable, so which rank stopped is unknown; MPI_Iallgather over 2 ranks waited "
            "30.2 s on rank 0, past resilience.timeout_s = 30 (raise it if a collective legitimately takes that long; "
            "0 = no limit); rank 0 is aborting the job");

  // A directory no other rank writes to (not shared between nodes).
  r = report({record(0, 1000, 2), std::nullopt, std::nullopt}, 1000.0);
  EXPECT_NE(failure_message(r).find("no other rank's heartbeat is readable in runs/x/.heartbeat"), std::string::npos);

  // Everyone alive and waiting: a deadlock, not a death.
  r = report({record(0, 1000, 2), record(1, 1000, 2)}, 1000.0);
  EXPECT_NE(failure_message(r).find("all 2 ranks still beat and wait in MPI at step 2"), std::string::npos);

  // Some files missing while others are fine.
  r = report({record(0, 1000, 2), record(1, 1000, 2), std::nullopt, std::nullopt}, 1000.0);
  EXPECT_NE(failure_message(r).find("no heartbeat from ranks 2, 3 (exited, or never started)"), std::string::npos)
      << failure_message(r);
}

TEST(Defaults, ScaleTheIntervalWithTheJob) {
  EXPECT_DOUBLE_EQ(default_heartbeat_interval(1), 1.0);
  EXPECT_DOUBLE_EQ(default_heartbeat_interval(2000), 1.0);
  EXPECT_DOUBLE_EQ(default_heartbeat_interval(10000), 5.0);
  EXPECT_DOUBLE_EQ(default_stale_after(1.0), 10.0);
  EXPECT_DOUBLE_EQ(default_stale_after(5.0), 50.0);
}

// ---- in process, under MPI --------------------------------------------------

// A directory every rank of this test sees (one machine: /tmp is shared).
std::string shared_dir(const char* tag) {
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return (fs::temp_directory_path() / ("examoe-test-watchdog-" + std::to_string(id)) / tag).string();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Watchdog, NotStartedOrTimeoutZeroChangesNothing) {
  EXPECT_FALSE(Watchdog::running());
  Watchdog::start(MPI_COMM_WORLD, shared_dir("off"), 0.0);  // 0 = no limit: nothing starts
  EXPECT_FALSE(Watchdog::running());
  Watchdog::set_progress(3);  // harmless
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  c->barrier();
  Watchdog::stop();  // harmless too
  EXPECT_FALSE(fs::exists(shared_dir("off")));
}

TEST(Watchdog, BeatsWhileRunningAndCleansUpOnStop) {
  const int rank = exa::comm_rank(MPI_COMM_WORLD);
  const std::string dir = shared_dir("beat");
  WatchdogOptions opt;
  opt.interval_s = 0.05;
  Watchdog::start(MPI_COMM_WORLD, dir, 60.0, opt);
  ASSERT_TRUE(Watchdog::running());
  EXPECT_THROW(Watchdog::start(MPI_COMM_WORLD, dir, 60.0, opt), std::exception);
  Watchdog::set_progress(5);
  const fs::path mine = fs::path(dir) / ("rank-" + std::to_string(rank));
  // Poll until the thread has written step 5 (ctest's TIMEOUT bounds this).
  std::optional<Heartbeat> hb;
  while (!(hb = parse_heartbeat(slurp(mine))) || hb->step != 5) usleep(10000);
  EXPECT_EQ(hb->rank, rank);
  EXPECT_EQ(hb->pid, static_cast<std::int64_t>(::getpid()));
  EXPECT_FALSE(hb->host.empty());

  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  std::vector<double> x{1.0 + rank};
  c->allreduce(x.data(), x.data(), 1, DType::F64);  // a bounded wait that completes
  const int n = c->size();
  EXPECT_DOUBLE_EQ(x[0], n * (n + 1) / 2.0);

  Watchdog::stop();
  EXPECT_FALSE(Watchdog::running());
  EXPECT_FALSE(fs::exists(mine));
  c->barrier();
  if (rank == 0) fs::remove_all(fs::path(dir).parent_path());
}

TEST(Watchdog, AWaitPastTheTimeoutReportsIt) {
  const int rank = exa::comm_rank(MPI_COMM_WORLD), size = exa::comm_size(MPI_COMM_WORLD);
  if (size < 2) GTEST_SKIP() << "needs a second rank to hold the barrier back";
  const std::string dir = shared_dir("timeout");
  std::vector<std::string> messages;
  // Rank 1 joins the barrier only once rank 0 has timed out and told it so:
  // no sleeps, no timing assumptions.
  Watchdog::set_failure_hook_for_testing([&](const std::string& m) {
    messages.push_back(m);
    int go = 1;
    if (rank == 0) MPI_Send(&go, 1, MPI_INT, 1, 99, MPI_COMM_WORLD);
  });
  WatchdogOptions opt;
  opt.interval_s = 0.05;
  Watchdog::start(MPI_COMM_WORLD, dir, 0.2, opt);
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  if (rank == 1) {
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  c->barrier();  // completes once rank 1 joins
  Watchdog::stop();
  Watchdog::set_failure_hook_for_testing(nullptr);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(fs::path(dir).parent_path());

  // Only rank 0 is sure to time out; the others may reach the barrier late.
  if (rank == 1) EXPECT_TRUE(messages.empty());
  if (rank != 0) return;
  ASSERT_EQ(messages.size(), 1u);
  const std::string& m = messages[0];
  EXPECT_NE(m.find("MPI_Ibarrier over " + std::to_string(size) + " ranks waited"), std::string::npos) << m;
  EXPECT_NE(m.find("past resilience.timeout_s = 0.2"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 is aborting the job"), std::string::npos) << m;
}

}  // namespace
