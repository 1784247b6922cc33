// exa::train::StopSignal: a signal delivered to one rank stops every rank at
// the same step, later signals change nothing, and the handlers the process
// had before are back afterwards unless a stop came. The whole path (signal mid-run, checkpoint,
// exit 75, resume) is the end-to-end test train.stop_signal_checkpoints_and_resumes.
// Run at 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <csignal>

#include "comm/mpi_env.hpp"
#include "train/stop_signal.hpp"

namespace {

using exa::train::StopSignal;

int last_rank() { return exa::comm_size(MPI_COMM_WORLD) - 1; }

extern "C" void previous_handler(int) {}

void (*current_handler(int sig))(int) {
  struct sigaction now {};
  ::sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

// First in this file: no StopSignal has received a signal yet, so the
// process' handlers are the ones it started with.
TEST(StopSignal, RestoresThePreviousHandlersWhenNoSignalCame) {
  struct sigaction sa {}, old_term {}, old_usr1 {};
  sa.sa_handler = previous_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &sa, &old_term), 0);
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old_usr1), 0);
  {
    StopSignal outer;
    {
      StopSignal inner;  // overlapping instances share the handlers
    }
    EXPECT_NE(current_handler(SIGTERM), previous_handler) << "the handlers must stay while an instance is alive";
    EXPECT_NE(current_handler(SIGUSR1), previous_handler);
    EXPECT_FALSE(outer.agreed(MPI_COMM_WORLD));
  }
  EXPECT_EQ(current_handler(SIGTERM), previous_handler) << "the handler installed before StopSignal was not restored";
  EXPECT_EQ(current_handler(SIGUSR1), previous_handler);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
}

TEST(StopSignal, NoSignalMeansNoStop) {
  StopSignal stop;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(stop.agreed(MPI_COMM_WORLD));
  EXPECT_EQ(stop.signal(), 0);
}

TEST(StopSignal, ASignalOnOneRankStopsEveryRank) {
  StopSignal stop;
  EXPECT_FALSE(stop.agreed(MPI_COMM_WORLD));
  // Only the last rank is signalled, as when a scheduler reaches one node first.
  if (exa::comm_rank(MPI_COMM_WORLD) == last_rank()) std::raise(SIGUSR1);
  EXPECT_TRUE(stop.agreed(MPI_COMM_WORLD));
  EXPECT_EQ(stop.signal(), SIGUSR1);
}

TEST(StopSignal, LaterSignalsChangeNothing) {
  StopSignal stop;
  if (exa::comm_rank(MPI_COMM_WORLD) == 0) std::raise(SIGTERM);
  ASSERT_TRUE(stop.agreed(MPI_COMM_WORLD));
  // A second signal (e.g. while the checkpoint is written) neither ends the
  // process nor changes what was agreed; agreed() stays true without
  // communicating, so ranks that stopped calling it are not waited for.
  std::raise(SIGUSR1);
  std::raise(SIGTERM);
  EXPECT_TRUE(stop.agreed(MPI_COMM_WORLD));
  EXPECT_EQ(stop.signal(), SIGTERM);
}

TEST(StopSignal, DifferentSignalsAgreeOnOne) {
  StopSignal stop;
  std::raise(exa::comm_rank(MPI_COMM_WORLD) == 0 ? SIGTERM : SIGUSR1);
  ASSERT_TRUE(stop.agreed(MPI_COMM_WORLD));
  const int expected = exa::comm_size(MPI_COMM_WORLD) > 1 ? std::max(SIGTERM, SIGUSR1) : SIGTERM;
  EXPECT_EQ(stop.signal(), expected);
}

TEST(StopSignal, AfterAStopTheHandlersStayAndANewInstanceStartsClean) {
  {
    StopSignal stop;
    std::raise(SIGUSR1);
    ASSERT_TRUE(stop.agreed(MPI_COMM_WORLD));
  }
  // The default action would end this test program.
  std::raise(SIGTERM);
  StopSignal fresh;
  EXPECT_FALSE(fresh.agreed(MPI_COMM_WORLD)) << "a signal received before this instance was carried over";
}

}  // namespace
